"""Only ``fencing/`` may write to ZooKeeper: a scan of the source tree proves it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXEMPT = {"fencing", "tests", "bench", ".venv", "build", "proto"}

# kazoo methods that change state; none of them has an unrelated common meaning.
WRITE_METHODS = {
    "create",
    "create_async",
    "delete",
    "delete_async",
    "ensure_path",
    "ensure_path_async",
    "transaction",
    "set_data",
    "set_acls",
    "set_acls_async",
    "reconfig",
    "reconfig_async",
}
# ``set`` is also threading.Event.set(): flag it only on something that looks like kazoo.
AMBIGUOUS = {"set", "set_async"}
CLIENT_HINTS = ("client", "zk", "kazoo")


def violations_in(source: str, filename: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        receiver = ast.unparse(node.func.value).lower()
        # A FencedWriter's own methods share kazoo's names; they are the sanctioned path.
        fenced = receiver.endswith("writer")
        writes = method in WRITE_METHODS and "socket" not in receiver and not fenced
        kazoo_set = method in AMBIGUOUS and any(h in receiver for h in CLIENT_HINTS)
        if writes or kazoo_set:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def project_modules() -> list[Path]:
    modules = []
    for path in REPO.rglob("*.py"):
        parts = path.relative_to(REPO).parts
        if parts[0] in EXEMPT or parts[:3] == ("nimbus", "api", "v1"):
            continue
        modules.append(path)
    return modules


def test_no_module_outside_fencing_writes_to_zookeeper() -> None:
    modules = project_modules()
    assert any(p.parts[-2] == "leader" for p in modules), "the scan must cover leader/"
    found = [v for p in modules for v in violations_in(p.read_text(), str(p.relative_to(REPO)))]
    assert found == [], "ZooKeeper writes outside fencing/:\n" + "\n".join(found)


def test_the_scan_catches_writes() -> None:
    planted = """
client.create("/storm/storms/x", b"")
self._client.set("/storm/leader-epoch", b"")
zk.transaction().commit()
self._stop.set()
socket.create_connection(("h", 1))
self._writer.delete("/storm/storms/x")
"""
    found = violations_in(planted, "planted.py")
    assert len(found) == 3, found
