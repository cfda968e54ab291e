/*
 * Election and fencing of the highly available Nimbus (DESIGN.md, Leadership items 1-8,
 * Fencing; issues 28 and 29), as SPIN checks it: three replicas, one ZooKeeper, one client.
 *
 * Run it with model/check (it compiles and runs SPIN's verifier; see README "A checked
 * model of election and fencing"). Every step a process takes prints one "@@" line, which
 * is what model/check turns into a readable counterexample.
 *
 * WHAT IS MODELLED
 *  - ZooKeeper as ONE linearizable store: sessions, an ephemeral sequential lock queue
 *    (q[], oldest first), one beat node per lock node, /leader-epoch, /requests/<id>,
 *    multi-ops applied all-or-nothing in one atomic step, session expiry (deletes the
 *    session's ephemeral nodes and closes its connection), and a stall of the whole
 *    server (it answers nothing for a while).
 *  - Replicas: the code gate (a flag that turns on late, DESIGN item 2-3), queueing,
 *    winning, take-office (check own lock node + /leader-epoch n+1 + own beat, item 4),
 *    beats (item 8: one in flight, a check of the own lock node, the leader's beat around
 *    the lease gate), the leader's lease on the time its last acknowledged beat was SENT,
 *    the token cancelled on SUSPENDED / own lock node deleted / a refused fenced write
 *    (item 5), resuming after a reconnect on the same session (leader/term.py), graceful
 *    hand-over (item 6), crash preemption on a refused connection (item 7), silence
 *    preemption with the beat-version check (item 8), the fenced writer (Fencing).
 *  - Faults: pauses of any length (SIGSTOP, GC), lost connections that kazoo notices
 *    late, session expiry, crashes (the process is gone: connections are refused),
 *    ZooKeeper stalls, graceful restarts; at most FAULTS of them per run (the budget keeps
 *    the state space finite; each planted bug needs at most two).
 *  - A client that sends one mutation with a request id and, after an unknown outcome
 *    (the reply was lost), retries it with the SAME id (nimbus/client.py); the leader
 *    adds create(/requests/<id>) to the fenced multi-op (nimbus/duties/requests.py).
 *
 * ABSTRACTIONS (each keeps the state space small and is sound for the properties)
 *  - Time is integer ticks of TICK_MS of real time, advanced by the environment. A step
 *    that a healthy replica (or ZooKeeper) takes "at once" is URGENT: time cannot pass
 *    while it is pending (network and processing delays are below one tick). Paused,
 *    crashed or cut-off replicas have no urgent steps: their time runs on.
 *  - Clock rates: each replica measures time on its own monotonic clock, whose rate is
 *    within 1 +- rho of real time. Only durations matter, so the model keeps real-time
 *    ages (saturating counters) and converts each bound measured on a local clock to the
 *    worst real bound, in whole ticks (see PLO, LMAX, CLAIM_END below).
 *  - Counters saturate: ages stop at the largest value any guard looks at (CLAIM_END,
 *    PLO, H_TICKS); the tick (0.4 s) is coarser than H, so beats come once a tick; a
 *    beat node's version is kept as one bit per watcher, "changed since the watcher
 *    read it" (versions only grow, so this is exactly the check's outcome).
 *  - Faults begin at quiet moments (between ticks) or in the middle of an operation of
 *    the replica they hit, and end at any moment (see env below). The beat node is
 *    created with the lock node (the code creates it with the first beat, up to H later;
 *    a lock node whose beat node stays absent for P is preempted by a multi-op that
 *    creates and deletes the beat node to prove it absent: not modelled here, as its
 *    safety rests on the same all-or-nothing multi-op and own-lock-node check).
 *  - The shorter window for a leader heard dead (its kernel closed the successor's held
 *    connection: leader/peer_link.py, L*(1+rho) + H instead of P) is not modelled: it
 *    changes only when the same fenced preemption is sent, and fencing, which is
 *    modelled, never depends on that time; the claim lease is over by then all the same.
 *  - Each queued replica watches the node just in front of it (the leader's, or a
 *    winner's that never took office, or a dead one between).
 *  - A beat is sent and applied in one step unless the link is down (the reply never
 *    comes) or ZooKeeper stalls (ZooKeeper applies it when the stall ends); its reply is
 *    processed in a later step, so a pause can fall between them. Take-office and
 *    preemption are one step each (the reads they depend on are done in the same step:
 *    the version checks are what make them safe, and those are in the multi-op).
 *  - Session expiry happens only after the session was silent (paused, cut off or
 *    crashed) for PLO ticks: the real timeout T (20 s) is far longer than P, so letting
 *    it happen sooner than T only adds behaviours.
 *  - A crashed replica stays down (a restart is a new replica, like a graceful restart
 *    here). One client, one mutation, at most MAXRETRY retries.
 *  - ZooKeeper's own replication (ZAB), its follower reads that may lag (the protocol
 *    calls sync() before the preemption's re-read), kazoo's threads, the gRPC layer and
 *    the record contents are not modelled.
 *
 * PROPERTIES (each failure prints "VIOLATED: <name>", which model/check reports)
 *  fencing       every applied cluster-state write was made by the holder of the lowest
 *                lock node at that step, during its term (/leader-epoch names it);
 *  epochs        epochs only grow (take-office, and the epoch stamped on every write);
 *  one-claim     at no step do two replicas claim leadership (under the rate bound);
 *  at-most-once  a retried mutation is applied at most once;
 *  no-false-failover  silence preemption never removes a replica that was running and
 *                connected for the whole window (a ZooKeeper stall is not silence);
 *  live (LTL)    under weak fairness: if some replica stays up and connected (and
 *                ZooKeeper answers), eventually a leader claims office for good.
 *
 * PLANTED BUGS (each must make model/check fail; tests/test_model.py runs them all):
 *  PLANT_UNFENCED_WRITE        the fenced write without check(own lock node)     -> fencing
 *  PLANT_LONG_LEASE            L = P, so L*(1+rho) + T_op > P*(1-rho)            -> one-claim
 *  PLANT_UNCHECKED_PREEMPT     silence preemption without the beat-version check -> one-claim
 *  PLANT_NO_WINDOW_RESET       the window not restarted after a reconnect or
 *                              while its own beats do not commit (a stall)       -> no-false-failover
 *  PLANT_RETRY_WITHOUT_ID      the client retries with a fresh request id        -> at-most-once
 *  PLANT_PREEMPT_FRESH_VERSION the check uses the version read just before the
 *                              delete, not the one watched all window            -> one-claim
 *  PLANT_OFFICE_NOT_BEAT       take-office starts the lease but does not write
 *                              the beat node (its version does not move)         -> one-claim
 *  PLANT_LEASE_FROM_ACK        the lease counted from the reply, not the send    -> one-claim
 *  PLANT_BEAT_BEHIND_GATE      the leader's beat waits for a valid lease         -> no-false-failover
 */

/* ---- timing: tests/test_model.py compares these with leader/settings.py ---- */
#define H_MS      200   /* beat interval H (DEFAULT_BEAT_INTERVAL) */
#define P_MS      2000  /* silence window P (DEFAULT_SILENCE_WINDOW) */
#ifdef PLANT_LONG_LEASE
#define L_MS      P_MS  /* planted: the lease as long as the window (L >= P) */
#else
#define L_MS      800   /* leader lease L (DEFAULT_LEADER_LEASE) */
#endif
#define TOP_MS    1000  /* T_op, the longest unfenced action after a claim check (MAX_UNFENCED_ACTION) */
#define RHO_INV   1000  /* clock-rate bound rho = 1/RHO_INV (CLOCK_RATE_BOUND) */
#define TICK_MS   400   /* the model's resolution: one tick of real time */

/* Every event happens on a tick (discrete time). A duration measured on a replica's clock
   is converted to the real ticks of the worst clock allowed by rho:
   H_TICKS   = beats at most one tick apart (H rounded up: fewer beats, less evidence);
   PLO       = ceil(P / (1 + rho)): the earliest tick a FAST clock says P has passed;
   LMAX      = the oldest whole-tick age a SLOW clock still calls younger than L;
   CLAIM_END = ceil((L + T_op) / (1 - rho)): from this age on, neither a claim nor an
               unfenced action begun under it (lasting at most T_op) can still be going on.
   The protocol's margin L*(1+rho) + T_op <= P*(1-rho) becomes CLAIM_END <= PLO here; at
   finer than a tick it is checked in exact arithmetic by tests/test_model.py. */
#define H_TICKS   ((H_MS + TICK_MS - 1) / TICK_MS)
#define PLO       ((P_MS * RHO_INV + (RHO_INV + 1) * TICK_MS - 1) / ((RHO_INV + 1) * TICK_MS))
#define LMAX      ((L_MS * RHO_INV + (RHO_INV - 1) * TICK_MS - 1) / ((RHO_INV - 1) * TICK_MS) - 1)
#define CLAIM_END (((L_MS + TOP_MS) * RHO_INV + (RHO_INV - 1) * TICK_MS - 1) / ((RHO_INV - 1) * TICK_MS))

#ifndef FAULTS
#define FAULTS 2
#endif
#define MAXRETRY 1

#define NR   3
#define NONE 3

/* replica states */
#define IDLE       0  /* not queued (waiting for the gate, or about to queue) */
#define QUEUED     1  /* own lock node in the queue, not in office */
#define LEADER     2  /* in office, token alive */
#define SUSPLEADER 3  /* in office when the connection dropped: token cancelled, may resume */
#define CRASHED    4

/* a replica's beat */
#define B_NONE 0
#define B_SENT 1  /* at ZooKeeper, which stalls */
#define B_OK   2  /* applied; reply not yet processed */
#define B_FAIL 3  /* refused: own lock node gone; reply not yet processed */
#define B_HUNG 4  /* sent on a dead connection: no reply until kazoo notices */

/* the client */
#define C_READY   0
#define C_WAIT    1
#define C_UNKNOWN 2
#define C_DONE    3

/* ---- ZooKeeper ---- */
byte q[NR] = NONE;    /* the lock queue, oldest (lowest sequence number) first */
byte qlen;
byte qi[NR] = NONE;   /* position of each replica's lock node in q, NONE when it has none */
bool sess[NR] = 1;    /* the replica's session is alive at ZooKeeper */
byte epoch;           /* /leader-epoch (its version moves with it: one set per term) */
byte eholder = NONE;  /* the replica /leader-epoch names */
bool zkstall;
bool reqdone[MAXRETRY + 1];  /* /requests/<id> exists */
bool chg[NR];         /* the beat node replica r watches changed since r read it */

/* ---- replicas ---- */
byte st[NR];
bool conn[NR] = 1;    /* kazoo's view: CONNECTED (else SUSPENDED) */
bool link[NR] = 1;    /* the real connection */
bool paused[NR];
bool gate[NR] = 1;    /* the code gate passes. Replica 2's starts closed and opens at any
                         time ("late"); by symmetry one late replica stands for any */
byte bt[NR];          /* ticks since own last beat was sent (saturates at H_TICKS) */
byte binfl[NR];       /* own beat in flight (B_*) */
byte bage[NR];        /* leader: ticks since the beat in flight was sent */
byte lease[NR] = CLAIM_END;  /* leader: ticks since its last acknowledged beat was sent */
byte myep[NR];        /* the epoch of the replica's term */
byte wt[NR] = NONE;   /* the replica whose beat node it watches */
byte win[NR];         /* silence window: ticks the watched beat stayed unchanged */
byte wpend[NR];       /* a fenced write (the client's request id + 1) checked, not yet sent */

/* ---- client and ghosts ---- */
#if defined(LIVENESS) || defined(NO_CLIENT)
byte mbox;
#else
byte mbox = 1;        /* request id + 1 waiting for a leader (the client sent it at t=0) */
#endif
byte cst = C_WAIT;
byte cid;
byte retries;
byte applied;         /* ghost: times the client's one mutation was applied */
byte lastep;          /* ghost: the epoch of the last applied write */
byte sil[NR];         /* ticks the replica's session has been silent (paused, cut off, crashed) */
bool hurt[NR];        /* ghost: the replica watched was paused, cut off or crashed at a tick
                         of the current window */
byte faults;
hidden byte tnow;      /* the tick, for the printed trail only (not part of the state) */
hidden byte i, j;

#define INQ(r)     (qi[r] != NONE)
#define PRED(r)    ((qi[r] == NONE || qi[r] == 0) -> NONE : q[qi[r] - 1])
#define RUN(r)     (st[r] != CRASHED && !paused[r])
#define ABLE(r)    (RUN(r) && link[r])
#define CLAIMS(r)  (st[r] == LEADER && lease[r] < CLAIM_END)
#define ZKOK(r)    (link[r] && !zkstall)

/* ZooKeeper heard from r's session: its expiry clock starts again */
#define HEARD(r) sil[r] = 0

#define REQUIRE(c, msg) if :: !(c) -> printf(msg); assert(c) :: else -> skip fi

#ifdef PLANT_BEAT_BEHIND_GATE
#define BEATGATE(r) && (st[r] != LEADER || lease[r] <= LMAX)
#else
#define BEATGATE(r)
#endif

#ifdef PLANT_NO_WINDOW_RESET
#define WINDOW_OK(r) 1
#else
/* the window runs only while the watcher is CONNECTED and its own beat of this tick was
   sent and acknowledged: otherwise it restarts (a stall of ZooKeeper is not silence) */
#define WINDOW_OK(r) (conn[r] && bt[r] == 0 && binfl[r] == B_NONE)
#endif

/* ---- step guards (shared by the steps and by the urgency test of the clock) ---- */
#define G_RECONNECT(r)  (RUN(r) && link[r] && !conn[r])
#define G_NOTICE(r)     (RUN(r) && !link[r] && conn[r])
#define G_BEAT(r)       (RUN(r) && conn[r] && (st[r] == QUEUED || st[r] == LEADER) && \
                         binfl[r] == B_NONE && bt[r] >= H_TICKS BEATGATE(r))
#define G_ACK(r)        (RUN(r) && (binfl[r] == B_OK || binfl[r] == B_FAIL))
#define G_WATCH(r)      (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         PRED(r) != NONE && wt[r] != PRED(r))
#define G_OFFICE(r)     (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         qi[r] == 0 && gate[r])
#define G_GONE(r)       (RUN(r) && conn[r] && (st[r] == LEADER || st[r] == QUEUED) && !INQ(r))
#define G_QUEUE(r)      (RUN(r) && st[r] == IDLE && gate[r] && conn[r] && ZKOK(r) && \
                         binfl[r] == B_NONE)
/* the timer fires at P on the watcher's clock: at PLO real ticks for the fastest clock
   (a later firing only gives the watched replica more time to beat) */
#define G_SILENT(r)     (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && wt[r] != NONE && \
                         wt[r] == PRED(r) && win[r] >= PLO)
#define G_REFUSED(r)    (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         PRED(r) != NONE && st[PRED(r)] == CRASHED && eholder == PRED(r))
#define G_ACCEPT(r)     (RUN(r) && st[r] == LEADER && conn[r] && mbox != 0 && wpend[r] == 0 && \
                         lease[r] <= LMAX)
#define G_WRITE(r)      (RUN(r) && wpend[r] != 0 && st[r] == LEADER && conn[r] && ZKOK(r))
/* what a running, connected replica does before time moves on */
#define URG(r) (ABLE(r) && (G_RECONNECT(r) || G_BEAT(r) || G_ACK(r) || G_WATCH(r) || \
                            G_OFFICE(r) || G_GONE(r) || G_QUEUE(r) || \
                            G_SILENT(r) || G_REFUSED(r) || G_ACCEPT(r) || G_WRITE(r)))
#define CLIENTURG (cst == C_UNKNOWN && retries < MAXRETRY)
#define ZKURG  (!zkstall && (binfl[0] == B_SENT || binfl[1] == B_SENT || binfl[2] == B_SENT))

/* ZooKeeper applies a beat: check(own lock node) + set(own beat node) */
inline zk_beat(x) {
  if
  :: INQ(x) -> binfl[x] = B_OK; bump(x)
  :: else -> binfl[x] = B_FAIL
  fi
}

/* the beat node of x changed: every watcher of x sees a new version */
inline bump(x) {
  j = 0;
  do
  :: j < NR -> if :: wt[j] == x -> chg[j] = 1 :: else -> skip fi; j++
  :: else -> j = 0; break
  od
}

/* delete x's lock node (and with it, for its watchers, its beat node) */
inline qremove(x) {
  i = qi[x];
  do
  :: i + 1 < qlen -> q[i] = q[i + 1]; qi[q[i]] = i; i++
  :: else -> break
  od;
  qlen--; q[qlen] = NONE; qi[x] = NONE; i = 0
}

/* the real connection of x breaks: a beat in flight may or may not have reached
   ZooKeeper; either way its reply is lost */
inline cut(x) {
  link[x] = 0;
  if
  :: binfl[x] == B_SENT -> binfl[x] = B_HUNG
  :: binfl[x] == B_SENT && !zkstall -> zk_beat(x); binfl[x] = B_HUNG
  :: else -> skip
  fi
}

/* end x's term or queue position locally (token cancelled), back to IDLE */
inline to_idle(x) {
  st[x] = IDLE; lease[x] = CLAIM_END; bage[x] = 0; bt[x] = 0;
  wt[x] = NONE; win[x] = 0; chg[x] = 0; hurt[x] = 0;
  if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi
}

/* the client's reply: delivered, or lost (an unknown outcome) */
inline reply() {
  if
  :: cst = C_DONE; printf("@@ t=%d client: got the reply\n", tnow)
  :: cst = C_UNKNOWN; printf("@@ t=%d client: reply lost (outcome unknown)\n", tnow)
  fi
}

active [NR] proctype replica() {
  byte r = _pid;
  byte t;
#ifndef NO_LATE_GATE
  if :: r == 2 -> gate[r] = 0 :: else -> skip fi;
#endif
  do
  /* the code gate passes (late, at any time) */
  :: atomic { RUN(r) && st[r] == IDLE && !gate[r] ->
       gate[r] = 1; printf("@@ t=%d replica %d: code gate passes\n", tnow, r) }
  /* queue: create an ephemeral sequential lock node (and its beat node) */
  :: atomic { G_QUEUE(r) ->
       q[qlen] = r; qi[r] = qlen; qlen++; st[r] = QUEUED; bt[r] = 0; HEARD(r);
       printf("@@ t=%d replica %d: queued (lock node %d in line)\n", tnow, r, qlen) }
  /* watch the beat node of the node in front (a fresh read starts the window) */
  :: atomic { G_WATCH(r) ->
       wt[r] = PRED(r); win[r] = 0; chg[r] = 0; hurt[r] = 0; HEARD(r);
       printf("@@ t=%d replica %d: watches the beat of replica %d (window restarts)\n", tnow, r, wt[r]) }
  /* won: take office in one multi-op: check(own lock node) + set /leader-epoch n+1 at its
     version + create /epochs/n+1 + set(own beat node): the first beat of the term */
  :: atomic { G_OFFICE(r) ->
       REQUIRE(qi[r] == 0, "VIOLATED: fencing (take-office by a replica that is not the lowest lock node)\n");
       REQUIRE(epoch < 255, "VIOLATED: epochs (the epoch would wrap)\n");
       epoch++; eholder = r; myep[r] = epoch; st[r] = LEADER; HEARD(r);
       lease[r] = 0; bage[r] = 0; bt[r] = 0; wt[r] = NONE; win[r] = 0; chg[r] = 0; hurt[r] = 0;
#ifndef PLANT_OFFICE_NOT_BEAT
       bump(r);
#endif
       printf("@@ t=%d replica %d: took office, epoch %d (lease starts)\n", tnow, r, epoch) }
  /* send a beat: check(own lock node) + set(own beat node), one in flight */
  :: atomic { G_BEAT(r) ->
       bt[r] = 0; bage[r] = 0;
       if
       :: !link[r] -> binfl[r] = B_HUNG
       :: link[r] && zkstall -> binfl[r] = B_SENT; HEARD(r)
       :: link[r] && !zkstall -> zk_beat(r); HEARD(r);
          /* a follower's reply changes nothing but its queue position: handled at once
             (the leader's lease is what a pause between reply and processing affects) */
          if
          :: st[r] == QUEUED && binfl[r] == B_OK -> binfl[r] = B_NONE
          :: st[r] == QUEUED && binfl[r] == B_FAIL -> binfl[r] = B_NONE; to_idle(r);
             printf("@@ t=%d replica %d: beat refused, own lock node gone: leaves the queue\n", tnow, r)
          :: else -> skip
          fi
       fi;
       printf("@@ t=%d replica %d: beat sent\n", tnow, r) }
  /* the beat's reply */
  :: atomic { G_ACK(r) ->
       if
       :: binfl[r] == B_OK ->
          if
          :: st[r] == LEADER || st[r] == SUSPLEADER ->  /* the lease is renewed either way */
#ifdef PLANT_LEASE_FROM_ACK
             lease[r] = 0;
#else
             if :: bage[r] < lease[r] -> lease[r] = bage[r] :: else -> skip fi;
#endif
             printf("@@ t=%d replica %d: beat acknowledged, lease age %d\n", tnow, r, lease[r])
          :: else -> printf("@@ t=%d replica %d: beat acknowledged\n", tnow, r)
          fi;
          binfl[r] = B_NONE; bage[r] = 0
       :: binfl[r] == B_FAIL ->
          binfl[r] = B_NONE; bage[r] = 0;
          if
          :: st[r] == LEADER || st[r] == QUEUED -> to_idle(r);
             printf("@@ t=%d replica %d: beat refused, own lock node gone: term ends\n", tnow, r)
          :: else -> skip
          fi
       fi }
  /* the watch on its own lock node fires: deleted (preempted, or expired) */
  :: atomic { G_GONE(r) ->
       to_idle(r); printf("@@ t=%d replica %d: own lock node deleted: deposed\n", tnow, r) }
  /* silence preemption */
  :: atomic { G_SILENT(r) ->
       t = wt[r]; HEARD(r);
#ifdef PLANT_PREEMPT_FRESH_VERSION
       chg[r] = 0;  /* planted: checks the version read just now, not the one watched */
#endif
#ifdef PLANT_UNCHECKED_PREEMPT
       if :: 1 ->   /* planted: no check of the beat node's version */
#else
       if :: !chg[r] ->  /* check(beat node of t, version watched all window) */
#endif
          printf("@@ t=%d replica %d: silence preemption: deletes the lock node of replica %d\n", tnow, r, t);
          REQUIRE(hurt[r], "VIOLATED: no-false-failover (preempted a replica running and connected for the whole window)\n");
          qremove(t);
          wt[r] = NONE; win[r] = 0; chg[r] = 0; hurt[r] = 0
       :: else ->
          printf("@@ t=%d replica %d: silence preemption refused: beat of %d moved\n", tnow, r, t);
          win[r] = 0; chg[r] = 0; hurt[r] = 0
       fi;
       t = 0 }
  /* crash preemption: the leader in front refuses connections (its process is gone):
     check(/leader-epoch, the version read) + delete its lock node */
  :: atomic { G_REFUSED(r) ->
       t = PRED(r); qremove(t); HEARD(r);
       printf("@@ t=%d replica %d: crash preemption: deleted the lock node of replica %d\n", tnow, r, t);
       t = 0 }
  /* kazoo notices the dead connection: SUSPENDED cancels the token, expires the lease */
  :: atomic { G_NOTICE(r) ->
       conn[r] = 0; lease[r] = CLAIM_END;
       if :: binfl[r] == B_HUNG || binfl[r] == B_SENT -> binfl[r] = B_NONE; bage[r] = 0 :: else -> skip fi;
       if :: st[r] == LEADER -> st[r] = SUSPLEADER :: else -> skip fi;
       if :: wpend[r] != 0 -> mbox = wpend[r]; wpend[r] = 0 :: else -> skip fi;
#ifndef PLANT_NO_WINDOW_RESET
       win[r] = 0;
#endif
       printf("@@ t=%d replica %d: connection SUSPENDED (token cancelled)\n", tnow, r) }
  /* kazoo reconnects */
  :: atomic { G_RECONNECT(r) ->
       conn[r] = 1;
       HEARD(r);
       if
       :: !sess[r] ->
          sess[r] = 1; if :: st[r] != IDLE -> to_idle(r) :: else -> skip fi;
          printf("@@ t=%d replica %d: reconnected: session LOST, new session\n", tnow, r)
       :: sess[r] && st[r] == SUSPLEADER ->
          if
          :: INQ(r) && eholder == r && epoch == myep[r] ->
             st[r] = LEADER;  /* resumed; the lease waits for the next beat */
             printf("@@ t=%d replica %d: reconnected: term resumed, epoch %d\n", tnow, r, epoch)
          :: else ->
             if :: INQ(r) -> qremove(r) :: else -> skip fi;
             to_idle(r);
             printf("@@ t=%d replica %d: reconnected: term over, queues again\n", tnow, r)
          fi
       :: else ->
#ifndef PLANT_NO_WINDOW_RESET
          win[r] = 0; chg[r] = 0; hurt[r] = 0;  /* read the watched beat again: the window restarts */
#endif
          printf("@@ t=%d replica %d: reconnected\n", tnow, r)
       fi }
  /* the leader serves the client: the writer's gate (token alive, lease valid) */
  :: atomic { G_ACCEPT(r) ->
       wpend[r] = mbox; mbox = 0;
       printf("@@ t=%d replica %d: accepts request id %d (lease age %d)\n", tnow, r, wpend[r] - 1, lease[r]) }
  /* ... and sends the fenced multi-op: check(own lock node) + create(/requests/<id>) +
     the mutation. A pause may fall between the gate and this step. */
  :: atomic { G_WRITE(r) ->
       HEARD(r);
#ifdef PLANT_UNFENCED_WRITE
       if :: 1 ->  /* planted: no check of the own lock node */
#else
       if :: INQ(r) ->
#endif
          if
          :: reqdone[wpend[r] - 1] ->
             printf("@@ t=%d replica %d: request id %d already done: replays its outcome\n", tnow, r, wpend[r] - 1)
          :: else ->
             printf("@@ t=%d replica %d: applies the mutation (request id %d, epoch %d)\n", tnow, r, wpend[r] - 1, myep[r]);
             REQUIRE(INQ(r) && qi[r] == 0, "VIOLATED: fencing (a write by a replica not holding the lowest lock node)\n");
             REQUIRE(eholder == r && myep[r] == epoch, "VIOLATED: fencing (a write outside the writer's term)\n");
             REQUIRE(myep[r] >= lastep, "VIOLATED: epochs (a write stamped with an older epoch)\n");
             lastep = myep[r]; reqdone[wpend[r] - 1] = 1; applied++;
             REQUIRE(applied <= 1, "VIOLATED: at-most-once (the retried mutation was applied twice)\n")
          fi;
          wpend[r] = 0;
          reply()
       :: else ->
          printf("@@ t=%d replica %d: fenced write refused (own lock node gone): deposed\n", tnow, r);
          to_idle(r)
       fi }
  od
}

/* the environment: time, ZooKeeper's own steps, faults.
   A fault begins at a quiet moment (nothing urgent pending: between ticks, where a real
   fault's exact time within a tick does not matter), or in the middle of an operation of
   the replica it hits (a fenced write checked but not sent, a beat's reply not yet
   processed). Faults end at any moment. This is what keeps two faults checkable. */
#define QUIET    (!(URG(0) || URG(1) || URG(2) || ZKURG || CLIENTURG))
#define MIDOP(x) (wpend[x] != 0 || binfl[x] == B_OK)
#define FAULT_OPTS(x) \
  :: atomic { faults < FAULTS && RUN(x) && (QUIET || MIDOP(x)) -> faults++; paused[x] = 1; \
       printf("@@ t=%d replica %d: PAUSED\n", tnow, x) } \
  :: atomic { paused[x] -> paused[x] = 0; printf("@@ t=%d replica %d: resumes\n", tnow, x) } \
  :: atomic { faults < FAULTS && st[x] != CRASHED && link[x] && (QUIET || MIDOP(x)) -> \
       faults++; cut(x); \
       printf("@@ t=%d replica %d: connection to ZooKeeper cut\n", tnow, x) } \
  :: atomic { st[x] != CRASHED && !link[x] && !conn[x] -> link[x] = 1; \
       printf("@@ t=%d replica %d: connection to ZooKeeper back\n", tnow, x) } \
  :: atomic { faults < FAULTS && st[x] != CRASHED && (QUIET || MIDOP(x)) -> \
       faults++; st[x] = CRASHED; \
       paused[x] = 0; wt[x] = NONE; win[x] = 0; chg[x] = 0; hurt[x] = 0; bt[x] = 0; bage[x] = 0; \
       lease[x] = CLAIM_END; binfl[x] = B_NONE; \
       if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi; \
       printf("@@ t=%d replica %d: CRASHED (its port tnow refuses)\n", tnow, x) } \
  :: atomic { faults < FAULTS && (QUIET || MIDOP(x)) && ABLE(x) && conn[x] && !zkstall && \
              (st[x] == LEADER || st[x] == QUEUED) -> faults++; \
       binfl[x] = B_NONE; \
       if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi; \
       to_idle(x); if :: INQ(x) -> qremove(x) :: else -> skip fi; \
       printf("@@ t=%d replica %d: graceful restart: deleted own lock node, new session\n", tnow, x) } \
  :: atomic { sess[x] && sil[x] >= PLO && !zkstall -> sess[x] = 0; \
       if :: INQ(x) -> qremove(x) :: else -> skip fi; \
       if :: link[x] -> cut(x) :: else -> skip fi; \
       printf("@@ t=%d ZooKeeper: session of replica %d EXPIRED\n", tnow, x) } \
  :: atomic { !zkstall && binfl[x] == B_SENT -> zk_beat(x); \
       printf("@@ t=%d ZooKeeper: applies the beat of replica %d\n", tnow, x) }

/* one tick of real time for replica x's ages. A change of the watched beat that x saw
   before this tick (ZooKeeper's notification, and x's read of the new version) restarts
   its window at the previous instant: processing it here, not as a step of its own,
   only lets x try a preemption with a stale view, which is what the check is for. */
#define AGE(x) \
  if \
  :: wt[x] != NONE && chg[x] && RUN(x) && conn[x] && link[x] -> win[x] = 0; chg[x] = 0; hurt[x] = 0 \
  :: else -> skip \
  fi; \
  if \
  :: wt[x] != NONE && WINDOW_OK(x) && win[x] < PLO -> win[x]++ \
  :: wt[x] != NONE && !(WINDOW_OK(x)) -> win[x] = 0; hurt[x] = 0 \
  :: else -> skip \
  fi; \
  if \
  :: (st[x] == QUEUED || st[x] == LEADER || st[x] == SUSPLEADER) && bt[x] < H_TICKS -> bt[x]++ \
  :: else -> skip \
  fi; \
  if \
  :: (st[x] == LEADER || st[x] == SUSPLEADER) && \
     (binfl[x] == B_SENT || binfl[x] == B_OK || binfl[x] == B_HUNG) && \
     bage[x] < CLAIM_END -> bage[x]++ \
  :: else -> skip \
  fi; \
  if \
  :: (st[x] == LEADER || st[x] == SUSPLEADER) && lease[x] < CLAIM_END -> lease[x]++ \
  :: else -> skip \
  fi; \
  if \
  :: ABLE(x) -> sil[x] = 0 \
  :: !ABLE(x) && sil[x] < PLO -> sil[x]++ \
  :: else -> skip \
  fi; \
  if :: wt[x] != NONE && !ABLE(wt[x]) -> hurt[x] = 1 :: else -> skip fi

/* at the tick, each running, connected replica whose beat is due beats (send and apply;
   a follower's reply is processed with it, the leader's in a step of its own). A replica
   that could not beat at the tick (paused, suspended) beats in a step of its own. */
#define TICKBEAT(x) \
  if \
  :: ABLE(x) && G_BEAT(x) -> \
     bt[x] = 0; bage[x] = 0; \
     if \
     :: zkstall -> binfl[x] = B_SENT; HEARD(x) \
     :: else -> zk_beat(x); HEARD(x); \
        if \
        :: st[x] == QUEUED && binfl[x] == B_OK -> binfl[x] = B_NONE \
        :: st[x] == QUEUED && binfl[x] == B_FAIL -> binfl[x] = B_NONE; to_idle(x) \
        :: else -> skip \
        fi \
     fi \
  :: else -> skip \
  fi

active proctype env() {
  do
  :: d_step { QUIET ->
       AGE(0); AGE(1); AGE(2); tnow++;
       TICKBEAT(0); TICKBEAT(1); TICKBEAT(2);
       printf("@@ t=%d tick (the replicas that can, beat)\n", tnow) }
  :: atomic { faults < FAULTS && QUIET && !zkstall -> faults++; zkstall = 1;
       printf("@@ t=%d ZooKeeper: STALLS\n", tnow) }
  :: atomic { zkstall -> zkstall = 0; printf("@@ t=%d ZooKeeper: answers again\n", tnow) }
  FAULT_OPTS(0)
  FAULT_OPTS(1)
  FAULT_OPTS(2)
  od
}

#if !defined(LIVENESS) && !defined(NO_CLIENT)
/* the client: one mutation; after an unknown outcome, retry with the same request id */
active proctype client() {
  do
  :: atomic { cst == C_READY -> mbox = cid + 1; cst = C_WAIT;
       printf("@@ t=%d client: sends the mutation, request id %d\n", tnow, cid) }
  :: atomic { cst == C_UNKNOWN && retries < MAXRETRY -> retries++;
#ifdef PLANT_RETRY_WITHOUT_ID
       cid++;  /* planted: the retry carries a fresh request id */
#endif
       cst = C_READY; printf("@@ t=%d client: retries, request id %d\n", tnow, cid) }
  :: cst == C_DONE || (cst == C_UNKNOWN && retries >= MAXRETRY) -> break
  od
}

#endif

#ifndef LIVENESS
/* the invariants that hold in every state */
active proctype monitor() {
  atomic { !(CLAIMS(0) + CLAIMS(1) + CLAIMS(2) <= 1) ->
    printf("VIOLATED: one-claim (two replicas claim leadership at once)\n");
    assert(CLAIMS(0) + CLAIMS(1) + CLAIMS(2) <= 1) }
}
#endif

#define UP(x)     (st[x] != CRASHED && !paused[x] && link[x] && !zkstall)
#define CLAIMING  (CLAIMS(0) || CLAIMS(1) || CLAIMS(2))
#ifdef LIVENESS
ltl live { (<>[] UP(0) || <>[] UP(1) || <>[] UP(2)) -> <>[] CLAIMING }
#endif
