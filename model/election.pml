/*
 * Election and fencing of the highly available Nimbus (DESIGN.md, Leadership items 1-9,
 * Fencing; issues 28 and 29), as SPIN checks it: three replicas, one ZooKeeper, one client.
 *
 * Run it with model/check (it compiles and runs SPIN's verifier; see README "A checked
 * model of election and fencing"). Every step a process takes prints one "@@" line, which
 * is what model/check turns into a readable counterexample.
 *
 * WHAT IS MODELLED
 *  - ZooKeeper as ONE linearizable store: sessions, an ephemeral sequential lock queue
 *    (q[], oldest first), one beat node per lock node whose data is the lease its last
 *    beat announced, /leader-epoch, /requests/<id>, multi-ops applied all-or-nothing in
 *    one atomic step, session expiry (deletes the session's ephemeral nodes and closes its
 *    connection), and three speeds: FAST (a write is answered within the tick), SLOW (it
 *    answers every write, D_SLOW ticks = 800 ms after its send: more than L_base) and
 *    STALLED (it answers nothing; what it got is applied when it answers again).
 *  - Replicas: the code gate (a flag that turns on late, DESIGN item 2-3), queueing,
 *    winning, take-office (check own lock node + /leader-epoch n+1 + own beat: the first
 *    beat, item 4); pipelined beats (items 8-9: one every H, not waiting for earlier
 *    replies, each a check of the own lock node, the leader's around the lease gate),
 *    each announcing the lease L_v its sender computes from the latency it observes, never
 *    ending before an earlier announcement (leader/beat_lease.py); the claim while some
 *    acknowledged beat v has now < send(v) + L_v; the token cancelled on SUSPENDED / own
 *    lock node deleted / a refused fenced write (item 5); resuming after a reconnect on
 *    the same session (leader/term.py); graceful hand-over (item 6); silence preemption
 *    fenced on the beat version watched, after the window that version announced,
 *    W_v = max(P, S_v), S_v = (L_v*(1+rho) + T_op)/(1-rho), or after S_v alone while the
 *    watched replica is heard dead (re-checked at the delete); the window runs only while
 *    the watcher is CONNECTED and its own beats commit with no gap longer than its own
 *    lease nor than L_v (see the hole this closes below); a preemption of the term's
 *    holder by the replica next in line with all the code takes office in the same
 *    multi-op (leader/silence_watch.py, fencing/beats.py), one write where a slow disk
 *    made it two; the fenced writer (Fencing).
 *    Refused connections depose nobody: the old crash preemption is gone.
 *  - Faults: pauses of any length (SIGSTOP, GC), lost connections that kazoo notices
 *    late, session expiry, crashes (the process is gone: its port refuses), a REJECT rule
 *    in front of a LIVE replica's port (closed links, refused reconnects, while it runs
 *    and beats), ZooKeeper stalls, a SLOW ZooKeeper, graceful restarts; at most FAULTS of
 *    them per run (the budget keeps the state space finite; each planted bug needs at
 *    most two).
 *  - A client that sends one mutation with a request id and, after an unknown outcome
 *    (the reply was lost), retries it with the SAME id (nimbus/client.py); the leader
 *    adds create(/requests/<id>) to the fenced multi-op (nimbus/duties/requests.py).
 *
 * ABSTRACTIONS (each keeps the state space small and is sound for the properties)
 *  - Time is integer ticks of TICK_MS of real time, advanced by the environment. A step
 *    that a healthy replica (or a FAST ZooKeeper) takes "at once" is URGENT: time cannot
 *    pass while it is pending. Paused, crashed or cut-off replicas have no urgent steps.
 *  - Clock rates: each replica measures time on its own monotonic clock, whose rate is
 *    within 1 +- rho of real time. The model keeps real-time ages (saturating counters)
 *    and converts each local bound to the worst real one in whole ticks, rounded up: a
 *    claim (and an unfenced action begun under it) on a beat sent at tick s may go on at
 *    ages < CEND; the watcher's timer fires no sooner than PLO, SLO, WLO ticks. Rounding
 *    both up keeps every exact margin (claim end <= window) true in ticks, so what the
 *    search finds are errors of the protocol's logic (which claim meets which window),
 *    each at least a tick long; margins finer than a tick are tests/test_model.py's, in
 *    exact arithmetic. That is why 400 ms ticks do for L_base = 600 ms: the claim is valid
 *    at ages 0 and 1 (a state at age a stands for real ages in [a, a+1) ticks), the short
 *    window at L_base (801.6 ms: 800.8 ms on the fastest clock) is 3 ticks and so is the
 *    claim's end with T_op (800.8 ms on the slowest clock: S_v = (L_v + T_op)(1+rho)/(1-rho)
 *    times T_op on the sender's clock too, as this model pointed out); the test checks the
 *    design's margin S_v*(1-rho) >= (L_v + T_op)*(1+rho) exactly.
 *    H = 200 ms is one beat a tick (rounded up: no property needs the second; fewer beats
 *    only delay: a beat a tick keeps an L_base claim valid).
 *  - The announced lease takes two values: BASE = L_base, and LONG = 2.4 s, the least
 *    whole-tick value for which a claim outlives the SLOW round trip (LMAX_L >=
 *    D_SLOW + 1), the window is S_v > P (both branches of W_v), an own lease reaches a
 *    BASE window (the hole below), and a claim outlasts a BASE window begun a beat later
 *    (the carry-over matters at a tick's resolution; the code's reach 2/3 T). A sender
 *    announces LONG when it has a beat in flight (a tick old: k * 400 ms > L_base) or
 *    remembers a round trip of a tick or more (slow[]: a SLOW reply, a stall, or its own
 *    pause between a reply and its processing), and, for the carry-over rule, until LHOLD
 *    ticks after its last LONG one (a carry-over beat is announced as LONG, not as the
 *    remainder: claims and windows only longer). The latency memory (10 s in the code)
 *    forgets at any moment. Every property compares a value's claim with the window
 *    derived from the same value, so two values exercise each rule; the margin for every
 *    value is the formula the test checks.
 *  - Beats in flight are a bitmask of send ages (fl[], saturating at AMAX: too old for any
 *    claim) with each one's class (fc[]); ZooKeeper applies a session's beats in order;
 *    the reply of several at once is the best claim among them (a claim's end only moves
 *    forward). A follower processes a reply on arrival, the leader (or a paused replica)
 *    in a later step, so a pause can fall between.
 *  - Counters saturate at the largest value a guard looks at; a beat node's version is one
 *    bit per watcher, "changed since the watcher read it" (versions only grow, so this is
 *    exactly the check's outcome), with the class the new version announced.
 *  - Faults begin at quiet moments (between ticks) or in the middle of an operation of
 *    the replica they hit, and end at any moment (see env below). The beat node is
 *    created with the lock node (the code creates it with the first beat, up to H later;
 *    a lock node whose beat node stays absent for P is preempted by a multi-op that
 *    proves it absent: not modelled, its safety rests on the same fenced multi-op).
 *  - A broken connection: the beats in flight reached ZooKeeper (applied at once) or did
 *    not (dropped; during a stall, dropped); either way their replies are lost, and beats
 *    sent on it reach nothing. So a one-way loss (requests arrive, replies do not) and
 *    the pipeline limit that answers it (PIPELINE_FLOOR) are not modelled.
 *  - Heard dead (a closed link and every reconnect since failing, leader/peer_link.py) is
 *    what the watched replica's port does now: it refuses while that replica is crashed
 *    or behind a REJECT rule; a paused replica's kernel still accepts.
 *  - Each queued replica watches the node just in front of it (the leader's, or a
 *    winner's that never took office, or a dead one between).
 *  - Take-office and preemption are one step each (the reads they depend on are done in
 *    the same step: the version checks are what make them safe, and those are in the
 *    multi-op). Take-office first answers the replica's earlier beats (one session, in
 *    order) and starts the claim at once, also when ZooKeeper is SLOW (a longer claim
 *    than the code's, which waits for the reply).
 *  - Session expiry happens only after the session was silent (paused, cut off or
 *    crashed) for EXPT ticks, the longer of P and the LONG claim: the real timeout T
 *    (20 s) is longer than both (the code caps the announced lease at 2/3 T), so letting
 *    it happen sooner than T, but not within a claim, only adds behaviours.
 *  - A crashed replica stays down (a restart is a new replica, like a graceful restart
 *    here). One client, one mutation, at most MAXRETRY retries.
 *  - ZooKeeper's own replication (ZAB), its follower reads that may lag (the protocol
 *    calls sync() before the preemption's re-read), the order in which it takes the
 *    requests of different sessions held over a stall (any order here), kazoo's threads,
 *    the gRPC layer and the record contents are not modelled.
 *
 * PROPERTIES (each failure prints "VIOLATED: <name>", which model/check reports)
 *  fencing       every applied cluster-state write was made by the holder of the lowest
 *                lock node at that step, during its term (/leader-epoch names it);
 *  epochs        epochs only grow (take-office, and the epoch stamped on every write);
 *  one-claim     at no step do two replicas claim leadership (a claim, or an unfenced
 *                action begun under it, under the rate bound);
 *  at-most-once  a retried mutation is applied at most once;
 *  no-false-failover  a preemption never removes a replica that was running and
 *                connected for the whole window (a ZooKeeper stall is not silence, a
 *                refused connection is not death);
 *  live (LTL)    under weak fairness: if some replica stays up and connected and
 *                ZooKeeper answers (FAST or SLOW: slowly is answering), eventually a
 *                replica holds a valid claim for good.
 *
 * THE HOLES THIS MODEL FOUND IN ITEM 9 AS FIRST WRITTEN (now planted bugs)
 *  PLANT_OWN_GAP_LEASE: an own-gap allowance of the own lease alone lets a ZooKeeper
 *  stall pass for silence. A replica that was paused learns a long round trip and holds
 *  a LONG lease; a stall longer than the window of the BASE replica in front, shorter
 *  than its own lease, restarts nothing, and when ZooKeeper answers it deletes the lock
 *  node of a replica whose beats were held in the stall. Bounding the allowance by L_v
 *  too closes it (W_v and S_v exceed L_v by (T_op + 2*rho*L_v)/(1-rho), just over H).
 *  PLANT_LEASE_SHRINKS: "some acknowledged beat" with L_v as computed: a LONG beat is
 *  acknowledged, the latency memory expires, the next beat announces L_base, and the
 *  successor's window on it (P) ends before the LONG claim. Hence the carry-over.
 *
 * PLANTED BUGS (each must make model/check fail; tests/test_model.py runs them all):
 *  PLANT_UNFENCED_WRITE        the fenced write without check(own lock node)     -> fencing
 *  PLANT_LONG_LEASE            the leader claims P while it announces L_base:
 *                              L*(1+rho) + T_op > P*(1-rho)                      -> one-claim
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
 *  PLANT_REFUSED_IS_DEAD       a refused connection alone deposes the leader
 *                              (the old crash preemption)                        -> no-false-failover
 *  PLANT_CLOSE_IS_DEATH        heard dead, the short window runs from the close
 *                              and the delete checks the version read last       -> no-false-failover
 *  PLANT_FIXED_LEASE           every beat announces L_base, whatever the latency -> live
 *  PLANT_LEASE_SHRINKS         an announcement may end before an earlier one     -> one-claim
 *  PLANT_FIXED_WINDOW          the successor waits P whatever was announced      -> one-claim
 *  PLANT_SHORT_WITHOUT_TOP     the short window without T_op: L*(1+rho)/(1-rho) -> one-claim
 *  PLANT_OWN_GAP_LEASE         the window survives any own gap up to the own
 *                              lease (the design's first wording)                -> no-false-failover
 *  PLANT_FOLD_ANY_TARGET       the preemption takes office in its multi-op also
 *                              when the silent node is not the term's holder     -> fencing
 */

/* ---- timing: tests/test_model.py compares these with leader/settings.py ---- */
#define H_MS      200   /* beat interval H (DEFAULT_BEAT_INTERVAL) */
#define P_MS      2000  /* silence window P, the least window (DEFAULT_SILENCE_WINDOW) */
#define L_MS      600   /* L_base, the least announced lease (DEFAULT_LEADER_LEASE) */
#define TOP_MS    200   /* T_op, the longest unfenced action after a claim check (MAX_UNFENCED_ACTION) */
#define RHO_INV   1000  /* clock-rate bound rho = 1/RHO_INV (CLOCK_RATE_BOUND) */
#define K_LAT_TENTHS 25    /* a beat announces 2.5 round trips (LEASE_PER_LATENCY, x10) */
#define K_WAIT    4     /* ... or 4 times its oldest beat's wait at an onset (LEASE_PER_WAIT) */
#define ONSET_TENTHS 15    /* ... a wait 1.5 times past every round trip remembered (ONSET_WAIT, x10) */
#define TICK_MS   400   /* the model's resolution: one tick of real time */
#define D_SLOW    2     /* ticks from a write's send to its reply when ZooKeeper is SLOW */
#define LL_MS     2400  /* the LONG announced lease (see ABSTRACTIONS) */
#ifdef PLANT_LONG_LEASE
#define CL_MS     P_MS  /* planted: the leader claims P, announcing L_base */
#else
#define CL_MS     L_MS  /* what a BASE beat's sender claims: what it announced */
#endif

/* Every event happens on a tick. A duration measured on a replica's clock is converted to
   the real ticks of the worst clock allowed by rho (all rounded up):
   H_TICKS      = beats at most one tick apart (H rounded up: fewer beats, less evidence);
   PLO          = ceil(P / (1 + rho)): the earliest tick a FAST clock says P has passed;
   LMAX_OF(L)   = the oldest whole-tick age a SLOW clock still calls younger than L;
   CEND_OF(L)   = ceil((L + T_op) / (1 - rho)): from this age on, neither a claim nor an
                  unfenced action begun under it can still be going on;
   SLO_B, SLO_L = ceil(S_v / (1 + rho)), S_v = (L_v*(1+rho) + T_op)/(1-rho), the short
                  window (its products overflow Promela's int: literals, which
                  tests/test_model.py recomputes exactly);
   WLO_B, WLO_L = the window W_v = max(P, S_v) in the same way. */
#define H_TICKS   ((H_MS + TICK_MS - 1) / TICK_MS)
#define PLO       ((P_MS * RHO_INV + (RHO_INV + 1) * TICK_MS - 1) / ((RHO_INV + 1) * TICK_MS))
#define LMAX_OF(ms) (((ms) * RHO_INV + (RHO_INV - 1) * TICK_MS - 1) / ((RHO_INV - 1) * TICK_MS) - 1)
#define CEND_OF(ms) ((((ms) + TOP_MS) * RHO_INV + (RHO_INV - 1) * TICK_MS - 1) / ((RHO_INV - 1) * TICK_MS))
#ifndef PLANT_SHORT_WITHOUT_TOP
#define SLO_B     3     /* S at L_base = (600 + 200)*(1+rho)/(1-rho) = 801.6 ms: 2.0020 ticks on a fast clock */
#define SLO_L     7     /* S at LONG = 2605.2 ms: 6.507 ticks */
#else
#define SLO_B     2     /* planted: L*(1+rho)/(1-rho) = 601.2 ms, 1.5015 ticks */
#define SLO_L     7     /* 2404.8 ms, 6.006 ticks */
#endif
#ifdef PLANT_FIXED_WINDOW
#define WLO_B     PLO   /* planted: P, whatever the beat announced */
#define WLO_L     PLO
#else
#define WLO_B     (PLO > SLO_B -> PLO : SLO_B)
#define WLO_L     (PLO > SLO_L -> PLO : SLO_L)
#endif
#define LMAX_B    LMAX_OF(CL_MS)
#define LMAX_L    LMAX_OF(LL_MS)
#define CEND_B    CEND_OF(CL_MS)
#define CEND_L    CEND_OF(LL_MS)
#define LSAT      CEND_L    /* lease ages saturate here: no claim */
/* a session expires after EXPT ticks of silence: sooner than T (20 s), but never within a
   claim: the code caps the announced lease at 2/3 T (leader/heartbeat.py), so a claim made
   on a beat the session sent ends before the session can expire */
#define EXPT      (PLO > CEND_L -> PLO : CEND_L)
#define AMAX      (LMAX_L + 1)  /* ages of beats in flight or answered saturate here: too
                                   old for any claim */
#define LHOLD     ((LL_MS - L_MS + TICK_MS - 1) / TICK_MS)  /* after a LONG announcement,
                           a BASE one ends no sooner only this many ticks later */

/* a class of announced lease: 0 BASE, 1 LONG */
#define LMS(c)    ((c) -> LL_MS : L_MS)  /* for the printed trail */
#define LMAXC(c)  ((c) -> LMAX_L : LMAX_B)
#define LEND(c)   (LMAXC(c) + 1)
#define CENDC(c)  ((c) -> CEND_L : CEND_B)
#define SLOC(c)   ((c) -> SLO_L : SLO_B)
#define WLOC(c)   ((c) -> WLO_L : WLO_B)

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

/* ZooKeeper's speed */
#define ZFAST  0
#define ZSTALL 1
#define ZSLOW  2
#define FLTOP    (1 << AMAX)                   /* in flight: AMAX ticks or more */
#define FLALL    ((FLTOP << 1) - 1)
#define SLOWMASK (FLALL - ((1 << D_SLOW) - 1))  /* in-flight ages >= D_SLOW */

/* a reply waiting to be processed */
#define R_NONE 0
#define R_OK   1  /* applied (the best claim of those answered) */
#define R_FAIL 2  /* refused: own lock node gone */

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
byte zkm;             /* ZFAST, ZSTALL, ZSLOW */
bool reqdone[MAXRETRY + 1];  /* /requests/<id> exists */
bool chg[NR];         /* the beat node replica r watches changed since r read it */
bool bcls[NR];        /* the lease class the last beat applied for replica r announced */

/* ---- replicas ---- */
byte st[NR];
bool conn[NR] = 1;    /* kazoo's view: CONNECTED (else SUSPENDED) */
bool link[NR] = 1;    /* the real connection */
bool paused[NR];
bool rej[NR];         /* a REJECT rule in front of the replica's port (it runs on) */
bool gate[NR] = 1;    /* the code gate passes. Replica 2's starts closed and opens at any
                         time ("late"); by symmetry one late replica stands for any */
byte bt[NR];          /* ticks since own last beat was sent (saturates at H_TICKS) */
byte fl[NR];          /* beats in flight: bit a = one sent a ticks ago (AMAX: or more) */
byte fc[NR];          /* ... and the class each announced */
byte rk[NR];          /* a reply not yet processed (R_*) */
byte ra[NR];          /* ... the send age of its beat */
bool rc[NR];          /* ... and the class that beat announced */
byte la[NR] = LSAT;   /* ticks since the send of the acknowledged beat with the latest
                         claim end (the leader's claim; a follower's own lease) */
bool lc[NR];          /* ... and the class it announced */
bool slow[NR];        /* remembers a round trip of a tick or more */
byte an[NR] = LHOLD;  /* ticks since its last LONG announcement (saturates at LHOLD) */
byte myep[NR];        /* the epoch of the replica's term */
byte wt[NR] = NONE;   /* the replica whose beat node it watches */
bool wc[NR];          /* the class the version watched announced */
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
hidden byte i, j, k, mm, c;

#define INQ(r)     (qi[r] != NONE)
#define PRED(r)    ((qi[r] == NONE || qi[r] == 0) -> NONE : q[qi[r] - 1])
#define RUN(r)     (st[r] != CRASHED && !paused[r])
#define ABLE(r)    (RUN(r) && link[r])
#define CLAIMS(r)  (st[r] == LEADER && la[r] < CENDC(lc[r]))
#define VALID(r)   (la[r] <= LMAXC(lc[r]))
#define ZKOK(r)    (link[r] && zkm != ZSTALL)
/* heard dead: its port refuses (crashed, or a REJECT rule in front of a live process) */
#define HDEAD(t)   (st[t] == CRASHED || rej[t])

/* ZooKeeper heard from r's session: its expiry clock starts again */
#define HEARD(r) sil[r] = 0

#define REQUIRE(cond, msg) if :: !(cond) -> printf(msg); assert(cond) :: else -> skip fi

#ifdef PLANT_BEAT_BEHIND_GATE
#define BEATGATE(r) && (st[r] != LEADER || VALID(r))
#else
#define BEATGATE(r)
#endif

/* the own-gap allowance: the watcher's own beats count as committing while the last one
   acknowledged was sent no longer ago than its own lease (it follows its own latency)
   and than the lease the watched version announced (else a stall shorter than a long own
   lease could outlast the watched replica's window) */
#ifdef PLANT_OWN_GAP_LEASE
#define OWNGAP(r) LMAXC(lc[r])  /* planted: the own lease alone */
#else
#define OWNGAP(r) (LMAXC(lc[r]) < LMAXC(wc[r]) -> LMAXC(lc[r]) : LMAXC(wc[r]))
#endif
#ifdef PLANT_NO_WINDOW_RESET
#define WINDOW_OK(r) 1
#else
/* the window runs only while the watcher is CONNECTED and within its own-gap allowance */
#define WINDOW_OK(r) (conn[r] && la[r] <= OWNGAP(r))
#endif

/* ---- step guards (shared by the steps and by the urgency test of the clock) ---- */
#define G_RECONNECT(r)  (RUN(r) && link[r] && !conn[r])
#define G_NOTICE(r)     (RUN(r) && !link[r] && conn[r])
#define G_BEAT(r)       (RUN(r) && conn[r] && (st[r] == QUEUED || st[r] == LEADER) && \
                         bt[r] >= H_TICKS BEATGATE(r))
#define G_ACK(r)        (RUN(r) && rk[r] != R_NONE)
#define G_WATCH(r)      (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         PRED(r) != NONE && wt[r] != PRED(r))
#define G_OFFICE(r)     (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         qi[r] == 0 && gate[r] && rk[r] == R_NONE)
#define G_GONE(r)       (RUN(r) && conn[r] && (st[r] == LEADER || st[r] == QUEUED) && !INQ(r))
#define G_QUEUE(r)      (RUN(r) && st[r] == IDLE && gate[r] && conn[r] && ZKOK(r) && \
                         fl[r] == 0 && rk[r] == R_NONE)
/* the timer fires at W_v (or S_v, heard dead: re-checked here, just before the delete)
   on the watcher's clock: at the whole tick the fastest clock allows (a later firing
   only gives the watched replica more time to beat) */
#define THR(r)          (HDEAD(wt[r]) && SLOC(wc[r]) < WLOC(wc[r]) -> SLOC(wc[r]) : WLOC(wc[r]))
#define G_SILENT(r)     (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && wt[r] != NONE && \
                         wt[r] == PRED(r) && win[r] >= THR(r))
#ifdef PLANT_REFUSED_IS_DEAD
#define G_REFUSED(r)    (RUN(r) && conn[r] && ZKOK(r) && st[r] == QUEUED && INQ(r) && \
                         PRED(r) != NONE && HDEAD(PRED(r)) && eholder == PRED(r))
#else
#define G_REFUSED(r)    0
#endif
#define G_ACCEPT(r)     (RUN(r) && st[r] == LEADER && conn[r] && mbox != 0 && wpend[r] == 0 && \
                         VALID(r))
#define G_WRITE(r)      (RUN(r) && wpend[r] != 0 && st[r] == LEADER && conn[r] && ZKOK(r))
/* what a running, connected replica does before time moves on */
#define URG(r) (ABLE(r) && (G_RECONNECT(r) || G_BEAT(r) || G_ACK(r) || G_WATCH(r) || \
                            G_OFFICE(r) || G_GONE(r) || G_QUEUE(r) || \
                            G_SILENT(r) || G_REFUSED(r) || G_ACCEPT(r) || G_WRITE(r)))
#define CLIENTURG (cst == C_UNKNOWN && retries < MAXRETRY)
#define ZKURG  (zkm == ZFAST && (fl[0] != 0 || fl[1] != 0 || fl[2] != 0))

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
  qlen--; q[qlen] = NONE; qi[x] = NONE; bcls[x] = 0; i = 0
}

/* end x's term or queue position locally (token cancelled), back to IDLE */
inline to_idle(x) {
  st[x] = IDLE; la[x] = LSAT; lc[x] = 0; bt[x] = 0;
  wt[x] = NONE; wc[x] = 0; win[x] = 0; chg[x] = 0; hurt[x] = 0;
  if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi
}

/* the lease x announces in the beat it sends now (into c) */
inline announce(x) {
#ifdef PLANT_FIXED_LEASE
  c = 0;  /* planted: L_base whatever the latency */
#else
  if
  :: fl[x] != 0 || slow[x] -> c = 1  /* k * (a beat's age or a round trip of a tick) > L_base */
#ifndef PLANT_LEASE_SHRINKS
  :: fl[x] == 0 && !slow[x] && an[x] < LHOLD -> c = 1  /* no end before an earlier one's */
#endif
  :: else -> c = 0
  fi;
#endif
  if :: c -> an[x] = 0 :: else -> skip fi
}

/* x processes the reply of its beat sent a ticks ago, which announced cl */
inline ack(x, a, cl) {
  if :: a >= 1 -> slow[x] = 1 :: else -> skip fi;
#ifndef PLANT_NO_WINDOW_RESET
  /* a round trip longer than the own-gap allowance: a stall, whatever follows; the
     window restarts */
  if :: st[x] == QUEUED && a > OWNGAP(x) -> win[x] = 0; hurt[x] = 0 :: else -> skip fi;
#endif
  if
#ifdef PLANT_LEASE_FROM_ACK
  :: 1 -> la[x] = 0; lc[x] = cl  /* planted: the lease counted from the reply */
#else
  :: a <= LMAXC(cl) && LEND(cl) + la[x] > LEND(lc[x]) + a -> la[x] = a; lc[x] = cl
#endif
  :: else -> skip  /* a claim that ends sooner, or is over already */
  fi
}

/* ZooKeeper answers one beat of x (sent a ticks ago, announcing cl): a running follower
   processes it at once, a leader (or a paused replica) in a step of its own */
inline reply_ok(x, a, cl) {
  if
  :: st[x] == QUEUED && RUN(x) -> ack(x, a, cl)
  :: st[x] == LEADER || st[x] == SUSPLEADER || (st[x] == QUEUED && !RUN(x)) ->
     if
     :: rk[x] == R_NONE -> rk[x] = R_OK; ra[x] = a; rc[x] = cl
     :: rk[x] == R_OK && LEND(cl) + ra[x] > LEND(rc[x]) + a -> ra[x] = a; rc[x] = cl
     :: else -> skip
     fi
  :: else -> skip
  fi
}

inline reply_fail(x) {
  if
  :: st[x] == QUEUED && RUN(x) -> to_idle(x);
     printf("@@ t=%d replica %d: beat refused, own lock node gone: leaves the queue\n", tnow, x)
  :: st[x] == LEADER || st[x] == SUSPLEADER || (st[x] == QUEUED && !RUN(x)) -> rk[x] = R_FAIL; ra[x] = 0; rc[x] = 0
  :: else -> skip
  fi
}

/* ZooKeeper applies the beats of x in flight with ages in mask m, oldest first (each a
   check(own lock node) + set(own beat node) multi-op), and answers them */
inline zk_apply(x, m) {
  mm = m;
  if
  :: INQ(x) ->
     k = 0;
     do :: k < AMAX && ((mm >> k) & 1) == 0 -> k++ :: else -> break od;
     bcls[x] = (fc[x] >> k) & 1; bump(x);
     k = AMAX + 1;
     do
     :: k > 0 -> k--; if :: (mm >> k) & 1 -> reply_ok(x, k, (fc[x] >> k) & 1) :: else -> skip fi
     :: else -> break
     od
  :: else -> reply_fail(x)
  fi;
  /* a round trip of a tick or more among them: learnt with the replies */
  if :: (mm & (FLALL - 1)) != 0 -> slow[x] = 1 :: else -> skip fi;
  fl[x] = fl[x] & (FLALL - mm); fc[x] = fc[x] & (FLALL - mm); k = 0; mm = 0
}

/* x sends a beat announcing the lease chosen now; on a dead connection it is lost */
/* take office in one multi-op: check(own lock node) + set /leader-epoch n+1 at its
   version + create /epochs/n+1 + set(own beat node): the first beat of the term. The
   beats in flight before it are answered first (one session, in order) */
inline take_office(x) {
  announce(x);
  if :: fl[x] != 0 -> zk_apply(x, fl[x]) :: else -> skip fi;
  REQUIRE(qi[x] == 0, "VIOLATED: fencing (take-office by a replica that is not the lowest lock node)\n");
  REQUIRE(epoch < 255, "VIOLATED: epochs (the epoch would wrap)\n");
  epoch++; eholder = x; myep[x] = epoch; st[x] = LEADER; HEARD(x);
  la[x] = 0; lc[x] = c; bt[x] = 0; wt[x] = NONE; wc[x] = 0; win[x] = 0; chg[x] = 0; hurt[x] = 0;
#ifndef PLANT_OFFICE_NOT_BEAT
  bcls[x] = c; bump(x);
#endif
  printf("@@ t=%d replica %d: took office, epoch %d (claim starts: announces %d ms)\n", tnow, x, epoch, LMS(c));
  c = 0
}

inline send(x) {
  bt[x] = 0; announce(x);
  if
  :: link[x] -> HEARD(x); fl[x] = fl[x] | 1; fc[x] = (fc[x] & 254) | c;
     if :: zkm == ZFAST -> zk_apply(x, 1) :: else -> skip fi
  :: else -> skip
  fi;
  c = 0
}

/* the real connection of x breaks: the beats in flight reached ZooKeeper (applied now) or
   did not (dropped); either way their replies are lost */
inline cut(x) {
  link[x] = 0;
  if
  :: fl[x] != 0 && zkm != ZSTALL && INQ(x) ->
     k = 0;
     do :: k < AMAX && ((fl[x] >> k) & 1) == 0 -> k++ :: else -> break od;
     bcls[x] = (fc[x] >> k) & 1; bump(x); k = 0
  :: true -> skip
  fi;
  fl[x] = 0; fc[x] = 0
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
       wt[r] = PRED(r); wc[r] = bcls[wt[r]]; win[r] = 0; chg[r] = 0; hurt[r] = 0; HEARD(r);
       printf("@@ t=%d replica %d: watches the beat of replica %d (window restarts; it announced %d ms)\n", tnow, r, wt[r], LMS(wc[r])) }
  /* won: take office in one multi-op: check(own lock node) + set /leader-epoch n+1 at its
     version + create /epochs/n+1 + set(own beat node): the first beat of the term */
  :: atomic { G_OFFICE(r) -> take_office(r) }
  /* send a beat: check(own lock node) + set(own beat node, the lease announced) */
  :: atomic { G_BEAT(r) ->
       printf("@@ t=%d replica %d: beat sent\n", tnow, r); send(r) }
  /* a reply processed */
  :: atomic { G_ACK(r) ->
       if
       :: rk[r] == R_OK ->
          if
          :: st[r] != IDLE -> ack(r, ra[r], rc[r]);
             if
             :: VALID(r) -> printf("@@ t=%d replica %d: beat acknowledged (sent %d ticks ago, announced %d ms): valid claim on a beat sent %d ticks ago (%d ms)\n",
                                   tnow, r, ra[r], LMS(rc[r]), la[r], LMS(lc[r]))
             :: else -> printf("@@ t=%d replica %d: beat acknowledged (sent %d ticks ago, announced %d ms): no valid claim\n",
                               tnow, r, ra[r], LMS(rc[r]))
             fi
          :: else -> skip
          fi
       :: rk[r] == R_FAIL ->
          if
          :: st[r] == LEADER || st[r] == QUEUED -> to_idle(r);
             printf("@@ t=%d replica %d: beat refused, own lock node gone: term ends\n", tnow, r)
          :: else -> skip
          fi
       fi;
       rk[r] = R_NONE; ra[r] = 0; rc[r] = 0 }
  /* the watch on its own lock node fires: deleted (preempted, or expired) */
  :: atomic { G_GONE(r) ->
       to_idle(r); printf("@@ t=%d replica %d: own lock node deleted: deposed\n", tnow, r) }
  /* silence preemption: check(beat node of t, version watched) + delete(its lock node) */
  :: atomic { G_SILENT(r) ->
       t = wt[r]; HEARD(r);
#ifdef PLANT_PREEMPT_FRESH_VERSION
       chg[r] = 0;  /* planted: checks the version read just now, not the one watched */
#endif
#ifdef PLANT_CLOSE_IS_DEATH
       if :: HDEAD(t) -> chg[r] = 0 :: else -> skip fi;  /* planted: heard dead, any version */
#endif
#ifdef PLANT_UNCHECKED_PREEMPT
       if :: 1 ->   /* planted: no check of the beat node's version */
#else
       if :: !chg[r] ->
#endif
          printf("@@ t=%d replica %d: silence preemption after %d ticks (heard dead %d): deletes the lock node of replica %d\n",
                 tnow, r, win[r], HDEAD(t), t);
          REQUIRE(hurt[r], "VIOLATED: no-false-failover (preempted a replica running and connected for the whole window)\n");
          wt[r] = NONE; wc[r] = 0; win[r] = 0; chg[r] = 0; hurt[r] = 0;
          /* folded: the silent one is the term's holder at the head of the queue, and we
             are next with the code: the same multi-op takes office (check(own lock node)
             + set /leader-epoch n+1 at the version read, which names the silent node +
             create /epochs/n+1 + set(own beat node)), as G_OFFICE; else a later step */
          if
#ifdef PLANT_FOLD_ANY_TARGET
          :: gate[r] && rk[r] == R_NONE && qi[r] == qi[t] + 1 ->  /* planted: not only the holder */
#else
          :: eholder == t && qi[t] == 0 && qi[r] == 1 && gate[r] && rk[r] == R_NONE ->
#endif
             qremove(t);
             printf("@@ t=%d replica %d: ... and takes office in the same multi-op\n", tnow, r);
             take_office(r)
          :: else -> qremove(t)
          fi
       :: else ->
          printf("@@ t=%d replica %d: silence preemption refused: beat of %d moved\n", tnow, r, t);
          wc[r] = bcls[t]; win[r] = 0; chg[r] = 0; hurt[r] = 0
       fi;
       t = 0 }
#ifdef PLANT_REFUSED_IS_DEAD
  /* planted, the old crash preemption: the leader in front refuses connections:
     check(/leader-epoch, the version read) + delete its lock node */
  :: atomic { G_REFUSED(r) ->
       t = PRED(r); HEARD(r);
       printf("@@ t=%d replica %d: crash preemption (port refuses): deletes the lock node of replica %d\n", tnow, r, t);
       REQUIRE(!ABLE(t), "VIOLATED: no-false-failover (deposed a replica running and connected: a refused connection is no death)\n");
       qremove(t); t = 0 }
#endif
  /* kazoo notices the dead connection: SUSPENDED cancels the token, expires the lease,
     forgets the beats in flight */
  :: atomic { G_NOTICE(r) ->
       conn[r] = 0; la[r] = LSAT; fl[r] = 0; fc[r] = 0;
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
             st[r] = LEADER;  /* resumed; the claim waits for the next beat */
             printf("@@ t=%d replica %d: reconnected: term resumed, epoch %d\n", tnow, r, epoch)
          :: else ->
             if :: INQ(r) -> qremove(r) :: else -> skip fi;
             to_idle(r);
             printf("@@ t=%d replica %d: reconnected: term over, queues again\n", tnow, r)
          fi
       :: else ->
#ifndef PLANT_NO_WINDOW_RESET
          if :: wt[r] != NONE -> wc[r] = bcls[wt[r]] :: else -> skip fi;
          win[r] = 0; chg[r] = 0; hurt[r] = 0;  /* read the watched beat again: the window restarts */
#endif
          printf("@@ t=%d replica %d: reconnected\n", tnow, r)
       fi }
  /* the leader serves the client: the writer's gate (token alive, claim valid) */
  :: atomic { G_ACCEPT(r) ->
       wpend[r] = mbox; mbox = 0;
       printf("@@ t=%d replica %d: accepts request id %d (claim age %d)\n", tnow, r, wpend[r] - 1, la[r]) }
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
#define MIDOP(x) (wpend[x] != 0 || rk[x] == R_OK)
/* the latency memory forgets at any moment; with the carry-over of announcements, it
   changes nothing before LHOLD ticks without a LONG one, so it waits for those */
#ifdef PLANT_LEASE_SHRINKS
#define FORGET(x) 1
#else
#define FORGET(x) (an[x] >= LHOLD)
#endif
#define FAULT_OPTS(x) \
  :: atomic { faults < FAULTS && RUN(x) && (QUIET || MIDOP(x)) -> faults++; paused[x] = 1; \
       printf("@@ t=%d replica %d: PAUSED\n", tnow, x) } \
  :: atomic { paused[x] -> paused[x] = 0; printf("@@ t=%d replica %d: resumes\n", tnow, x) } \
  :: atomic { faults < FAULTS && st[x] != CRASHED && link[x] && (QUIET || MIDOP(x)) -> \
       faults++; cut(x); \
       printf("@@ t=%d replica %d: connection to ZooKeeper cut\n", tnow, x) } \
  :: atomic { st[x] != CRASHED && !link[x] && !conn[x] -> link[x] = 1; \
       printf("@@ t=%d replica %d: connection to ZooKeeper back\n", tnow, x) } \
  :: atomic { faults < FAULTS && st[x] != CRASHED && !rej[x] && QUIET -> faults++; rej[x] = 1; \
       printf("@@ t=%d replica %d: a REJECT rule in front of its port (it runs on)\n", tnow, x) } \
  :: atomic { rej[x] -> rej[x] = 0; printf("@@ t=%d replica %d: the REJECT rule is lifted\n", tnow, x) } \
  :: atomic { slow[x] && FORGET(x) -> slow[x] = 0; \
       printf("@@ t=%d replica %d: forgets its slow round trips\n", tnow, x) } \
  :: atomic { faults < FAULTS && st[x] != CRASHED && (QUIET || MIDOP(x)) -> \
       faults++; st[x] = CRASHED; \
       paused[x] = 0; wt[x] = NONE; wc[x] = 0; win[x] = 0; chg[x] = 0; hurt[x] = 0; bt[x] = 0; \
       la[x] = LSAT; lc[x] = 0; fl[x] = 0; fc[x] = 0; rk[x] = R_NONE; ra[x] = 0; rc[x] = 0; \
       slow[x] = 0; an[x] = LHOLD; rej[x] = 0; \
       if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi; \
       printf("@@ t=%d replica %d: CRASHED (its port now refuses)\n", tnow, x) } \
  :: atomic { faults < FAULTS && (QUIET || MIDOP(x)) && ABLE(x) && conn[x] && zkm != ZSTALL && \
              (st[x] == LEADER || st[x] == QUEUED) -> faults++; \
       fl[x] = 0; fc[x] = 0; rk[x] = R_NONE; ra[x] = 0; rc[x] = 0; \
       if :: wpend[x] != 0 -> mbox = wpend[x]; wpend[x] = 0 :: else -> skip fi; \
       to_idle(x); if :: INQ(x) -> qremove(x) :: else -> skip fi; \
       printf("@@ t=%d replica %d: graceful restart: deleted own lock node, new session\n", tnow, x) } \
  :: atomic { sess[x] && sil[x] >= EXPT && zkm != ZSTALL -> sess[x] = 0; \
       if :: INQ(x) -> qremove(x) :: else -> skip fi; \
       if :: link[x] -> cut(x) :: else -> skip fi; \
       printf("@@ t=%d ZooKeeper: session of replica %d EXPIRED\n", tnow, x) } \
  :: atomic { zkm == ZFAST && fl[x] != 0 -> zk_apply(x, fl[x]); \
       printf("@@ t=%d ZooKeeper: answers the beats of replica %d it held\n", tnow, x) }

/* one tick of real time for replica x's ages. A change of the watched beat that x saw
   before this tick (ZooKeeper's notification, and x's read of the new version and the
   lease it announced) restarts its window at the previous instant: processing it here,
   not as a step of its own, only lets x try a preemption with a stale view, which is
   what the check is for. */
#ifdef PLANT_CLOSE_IS_DEATH
#define SEEN(x) && !HDEAD(wt[x])  /* planted: heard dead, a new version does not count */
#else
#define SEEN(x)
#endif
#define AGE(x) \
  if \
  :: wt[x] != NONE && chg[x] && RUN(x) && conn[x] && link[x] SEEN(x) -> \
     wc[x] = bcls[wt[x]]; win[x] = 0; chg[x] = 0; hurt[x] = 0 \
  :: else -> skip \
  fi; \
  if :: la[x] + 1 < CENDC(lc[x]) -> la[x]++ :: la[x] + 1 >= CENDC(lc[x]) && la[x] < LSAT -> la[x] = LSAT; lc[x] = 0 :: else -> skip fi; \
  if \
  :: wt[x] != NONE && WINDOW_OK(x) && win[x] < WLOC(wc[x]) -> win[x]++ \
  :: wt[x] != NONE && !(WINDOW_OK(x)) -> win[x] = 0; hurt[x] = 0 \
  :: else -> skip \
  fi; \
  if \
  :: (st[x] == QUEUED || st[x] == LEADER || st[x] == SUSPLEADER) && bt[x] < H_TICKS -> bt[x]++ \
  :: else -> skip \
  fi; \
  if :: rk[x] != R_NONE && ra[x] < AMAX -> ra[x]++ :: else -> skip fi; \
  fl[x] = ((fl[x] << 1) & FLALL) | (fl[x] & FLTOP); \
  fc[x] = ((fc[x] << 1) & FLALL) | (fc[x] & FLTOP); \
  if :: an[x] < LHOLD -> an[x]++ :: else -> skip fi; \
  if \
  :: ABLE(x) -> sil[x] = 0 \
  :: !ABLE(x) && sil[x] < EXPT -> sil[x]++ \
  :: else -> skip \
  fi; \
  if :: wt[x] != NONE && !ABLE(wt[x]) -> hurt[x] = 1 :: else -> skip fi

/* at the tick, a SLOW ZooKeeper answers the beats sent D_SLOW ticks ago */
#define SLOWAPPLY(x) \
  if \
  :: zkm == ZSLOW && (fl[x] & SLOWMASK) != 0 -> zk_apply(x, fl[x] & SLOWMASK) \
  :: else -> skip \
  fi

/* at the tick, each running, connected replica whose beat is due beats (a FAST ZooKeeper
   applies it at once; a follower's reply is processed with it, the leader's in a step of
   its own). A replica that could not beat at the tick beats in a step of its own. */
#define TICKBEAT(x) \
  if \
  :: ABLE(x) && G_BEAT(x) -> send(x) \
  :: else -> skip \
  fi

active proctype env() {
  do
  :: d_step { QUIET ->
       AGE(0); AGE(1); AGE(2); tnow++;
       SLOWAPPLY(0); SLOWAPPLY(1); SLOWAPPLY(2);
       TICKBEAT(0); TICKBEAT(1); TICKBEAT(2);
       printf("@@ t=%d tick (the replicas that can, beat)\n", tnow) }
  :: atomic { faults < FAULTS && QUIET && zkm == ZFAST -> faults++; zkm = ZSTALL;
       printf("@@ t=%d ZooKeeper: STALLS\n", tnow) }
  :: atomic { faults < FAULTS && QUIET && zkm == ZFAST -> faults++; zkm = ZSLOW;
       printf("@@ t=%d ZooKeeper: SLOW (every write answered %d ticks after its send)\n", tnow, D_SLOW) }
  :: atomic { zkm != ZFAST -> zkm = ZFAST; printf("@@ t=%d ZooKeeper: answers fast again\n", tnow) }
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

/* up: running, connected, and ZooKeeper answers (FAST or SLOW: slowly is answering) */
#define UP(x)     (st[x] != CRASHED && !paused[x] && link[x] && zkm != ZSTALL)
/* a valid claim (VALID, spelt without the conditional expression LTL cannot parse) */
#define HOLDS(x)  (st[x] == LEADER && ((lc[x] && la[x] <= LMAX_L) || (!lc[x] && la[x] <= LMAX_B)))
#ifdef LIVENESS
ltl live { (<>[] UP(0) || <>[] UP(1) || <>[] UP(2)) -> <>[] (HOLDS(0) || HOLDS(1) || HOLDS(2)) }
#endif
