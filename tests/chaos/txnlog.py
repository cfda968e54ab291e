"""S1 from ZooKeeper's own transaction log: every write of leader-only state, at its zxid,
came from the session whose lock node was first in the queue then, through a fenced
multi-op that checked that very node.

The final state shows only each record's last write: a zombie's write that a real
leader overwrote later leaves no trace there, but it is in the log. The logs are dumped
with ZooKeeper's ``TxnLogToolkit`` (in the jars the project already runs) from every
server's data directory, and merged by zxid (a server that was down misses some).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devtools.zkserver import ZooKeeperCluster

#: Folders only the leader writes, through fenced multi-ops.
LEADER_ONLY = (
    "storms", "names", "assignments", "epochs", "leader-epoch", "requests", "errors",
    "credentials",
)  # fmt: skip

_ENTRY = re.compile(
    r"^\S+, .*? session (0x[0-9a-f]+) cxid 0x[0-9a-f]+ zxid (0x[0-9a-f]+) (\w+)(.*)$"
)
#: A multi-op's operations. TxnLogToolkit prints each path after its 4-byte length (three
#: NULs and one byte of any value, for a path under 16 MiB), not after blanks: a parser that
#: expected blanks read no operation of any multi-op, and S1 then judged none of them.
_MULTI_OP = re.compile(
    r"\b(check|create|create2|createContainer|createTTL|setData|delete|error):"
    r"(?:\x00\x00\x00.|\s+)?(/[^\x00-\x20;,]*)?",
    re.DOTALL,
)
_FIRST_PATH = re.compile(r"^\s*(/[^\s,]*)")
_CLOSED = re.compile(r"'(/[^,}']*)")


@dataclass
class Txn:
    zxid: int
    session: int
    kind: str
    ops: list[tuple[str, str]] = field(default_factory=list)  # (op, path)


def dump(log: Path, classpath: str) -> str:
    done = subprocess.run(
        ["java", "-cp", classpath, "org.apache.zookeeper.server.persistence.TxnLogToolkit",
         "-d", str(log)],
        capture_output=True, text=True, errors="replace", timeout=300, check=False,
    )  # fmt: skip
    return done.stdout


def parse(text: str) -> list[Txn]:
    txns: list[Txn] = []
    current: tuple[re.Match[str], list[str]] | None = None

    def close() -> None:
        if current is None:
            return
        match, rest = current
        session, zxid, kind, head = match.groups()
        body = head + "\n" + "\n".join(rest)
        txn = Txn(int(zxid, 16), int(session, 16), kind)
        if kind == "multi":
            txn.ops = [(op, path or "") for op, path in _MULTI_OP.findall(body)]
        elif kind == "closeSession":
            txn.ops = [("delete", path) for path in _CLOSED.findall(body)]
        else:
            first = _FIRST_PATH.match(head)
            if first:
                txn.ops = [(kind, first.group(1))]
        txns.append(txn)

    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            close()
            current = (match, [])
        elif current is not None:
            current[1].append(line)
    close()
    return txns


def server_logs(zk: ZooKeeperCluster) -> list[Path]:
    return sorted(zk.data_dir.glob("**/version-2/log.*"))


def read_txns(zk: ZooKeeperCluster) -> list[Txn]:
    """Every server's log, merged by zxid."""
    classpath = zk.classpath
    merged: dict[int, Txn] = {}
    for log in server_logs(zk):
        for txn in parse(dump(log, classpath)):
            merged.setdefault(txn.zxid, txn)
    return [merged[z] for z in sorted(merged)]


def _sequence(name: str) -> int:
    tail = name.rsplit("__", 1)[-1]
    digits = "".join(ch for ch in tail if ch.isdigit())
    return int(digits) if digits else 0


def s1_txnlog(txns: Iterable[Txn], root: str) -> list[str]:
    """Violations: leader-only writes not fenced by the lock holder's own session."""
    lock_folder = f"{root}/leader-lock/"
    # Leader-only records: ``/leader-epoch`` itself, and anything below the other folders
    # (the structural folders themselves are made unfenced by every replica at start).
    node = f"{root}/leader-epoch"
    trees = tuple(f"{root}/{folder}/" for folder in LEADER_ONLY if folder != "leader-epoch")
    queue: dict[str, int] = {}  # lock node -> owning session
    found: list[str] = []
    for txn in txns:
        if txn.kind == "error" or any(op == "error" for op, _ in txn.ops):
            continue  # nothing applied
        writes = [(op, p) for op, p in txn.ops if op != "check"]
        touched = [p for _, p in writes if p == node or p.startswith(trees)]
        # A multi-op is atomic: the lock nodes it deletes (a silent holder's, preempted by
        # the next in line, who takes office in the same multi-op) are gone for its writes.
        deleted = {p for op, p in writes if op == "delete"}
        if touched:
            remaining = {n: s for n, s in queue.items() if n not in deleted}
            found += _judge(txn, touched, remaining, lock_folder)
        for op, path in writes:
            if not path.startswith(lock_folder) or "/" in path[len(lock_folder) :]:
                continue
            if op.startswith("create"):
                queue[path] = txn.session
            elif op == "delete":
                queue.pop(path, None)
    return found


def _judge(txn: Txn, touched: list[str], queue: dict[str, int], lock_folder: str) -> list[str]:
    what = f"zxid {txn.zxid:#x} ({txn.kind} of {touched[0]})"
    checks = [p for op, p in txn.ops if op == "check"]
    if txn.kind != "multi" or not txn.ops or txn.ops[0][0] != "check":
        return [f"{what}: not a fenced multi-op"]
    node = checks[0]
    if not node.startswith(lock_folder):
        return [f"{what}: fenced on {node}, not on a lock node"]
    if node not in queue:
        return [f"{what}: fenced on {node}, which was not in the queue"]
    first = min(queue, key=lambda n: _sequence(n))
    if node != first:
        return [f"{what}: fenced on {node} while {first} was first in the queue"]
    if queue[node] != txn.session:
        return [f"{what}: by session {txn.session:#x}, not the lock node's own {queue[node]:#x}"]
    return []
