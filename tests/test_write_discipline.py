"""Only ``fencing/`` writes to ZooKeeper, and the lock queue alone through a kazoo recipe.

A scan of the source proves it: no module outside ``fencing/`` calls (or hands on) a
kazoo write method, and none but the lock queue's builds one of kazoo's recipes that
write (a lock, an election, a counter, a barrier...), whose creates and deletes a scan of
method names would never see. A ``FencedWriter``'s own methods share kazoo's names; a
receiver counts as one only where the module declares it so (an annotation that mypy
checks), never by its name.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXEMPT = {"fencing", "tests", "bench", ".venv", "build"}

#: The lock queue: the one module that may build kazoo's Lock recipe (its own lock node).
LOCK_QUEUE = "leader/read_ahead.py"

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

# kazoo's recipe modules whose objects write (watchers and cache only read).
WRITING_RECIPES = {
    f"kazoo.recipe.{name}"
    for name in ("barrier", "counter", "election", "lease", "lock", "partitioner", "party", "queue")
}
# The recipe factories every KazooClient carries (``client.Lock(...)``), the writing ones.
CLIENT_RECIPES = {
    "Barrier",
    "Counter",
    "DoubleBarrier",
    "Election",
    "Lock",
    "LockingQueue",
    "MultiNonBlockingLease",
    "NonBlockingLease",
    "Party",
    "Queue",
    "ReadLock",
    "Semaphore",
    "SetPartitioner",
    "ShallowParty",
    "WriteLock",
}
FENCED_WRITER = "FencedWriter"


def _looks_like_client(receiver: str) -> bool:
    return any(h in receiver.lower() for h in CLIENT_HINTS)


def _annotated_writer(annotation: ast.expr | None) -> bool:
    """``FencedWriter``, ``fencing.FencedWriter`` or ``"FencedWriter"`` (not ``| None``:
    a call on an optional would not pass mypy without a narrowing we cannot see here)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1] == FENCED_WRITER
    return ast.unparse(annotation).rsplit(".", 1)[-1] == FENCED_WRITER


def _fenced_writers(tree: ast.Module) -> set[str]:
    """Receivers this module declares to be a ``FencedWriter``: annotated parameters and
    names, and ``self.<attr>`` assigned from such a parameter or annotated itself."""
    params: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _annotated_writer(node.annotation):
            params.add(node.arg)
    declared = set(params)
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and _annotated_writer(node.annotation):
            declared.add(ast.unparse(node.target))
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in params
        ):
            declared.update(ast.unparse(t) for t in node.targets)
    return declared


def _recipe_names(
    tree: ast.Module, project_recipes: frozenset[str] = frozenset()
) -> tuple[set[str], set[str]]:
    """Local names bound to a writing recipe's class (kazoo's, or a project class deriving
    from one: ``project_recipes``, dotted), and to a writing recipe's module."""
    classes: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if node.module in WRITING_RECIPES or full in project_recipes:
                    classes.add(alias.asname or alias.name)
                elif full in WRITING_RECIPES:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in WRITING_RECIPES:
                    modules.add(alias.asname or alias.name)
    return classes, modules


def _builds_recipe(call: ast.Call, classes: set[str], modules: set[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in classes
    if not isinstance(func, ast.Attribute):
        return False
    owner = ast.unparse(func.value)
    if owner in modules or owner in WRITING_RECIPES:
        return True  # lock.Lock(...), kazoo.recipe.lock.Lock(...)
    return func.attr in CLIENT_RECIPES and _looks_like_client(owner)  # client.Lock(...)


def _recipe_bases(node: ast.ClassDef, classes: set[str], modules: set[str]) -> list[str]:
    """The bases of ``node`` that are writing recipes: deriving from one builds one."""
    return [
        ast.unparse(base)
        for base in node.bases
        if (isinstance(base, ast.Name) and base.id in classes)
        or (
            isinstance(base, ast.Attribute)
            and (ast.unparse(base.value) in modules or ast.unparse(base.value) in WRITING_RECIPES)
        )
    ]


def recipe_subclasses(source: str, module: str) -> set[str]:
    """Dotted names of the classes ``source`` (module ``module``) derives from a recipe."""
    tree = ast.parse(source)
    classes, modules = _recipe_names(tree)
    return {
        f"{module}.{node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and _recipe_bases(node, classes, modules)
    }


def violations_in(
    source: str,
    filename: str,
    *,
    recipes_allowed: bool = False,
    project_recipes: frozenset[str] = frozenset(),
) -> list[str]:
    """Every ZooKeeper write (or writing recipe built) in ``source`` outside ``fencing/``."""
    tree = ast.parse(source, filename)
    writers = _fenced_writers(tree)
    classes, modules = _recipe_names(tree, project_recipes)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not recipes_allowed:
            found += [
                f"{filename}:{node.lineno}: {base} (a recipe)"
                for base in _recipe_bases(node, classes, modules)
            ]
        if (
            isinstance(node, ast.Call)
            and not recipes_allowed
            and _builds_recipe(node, classes, modules)
        ):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node.func)} (a recipe)")
        if not isinstance(node, ast.Attribute):
            continue
        method = node.attr
        receiver = ast.unparse(node.value)
        if receiver in writers:
            continue  # a FencedWriter's own method: the sanctioned path
        clientish = _looks_like_client(receiver)
        if id(node) in called:
            writes = method in WRITE_METHODS and "socket" not in receiver.lower()
            kazoo_set = method in AMBIGUOUS and clientish
        else:
            # Handed on uncalled (``client.retry(client.create, ...)``): still a write.
            writes = method in WRITE_METHODS | AMBIGUOUS and clientish
            kazoo_set = False
        if writes or kazoo_set:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def project_modules(root: Path = REPO) -> list[Path]:
    modules = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] not in EXEMPT:
            modules.append(path)
    return modules


def scan(root: Path = REPO) -> list[str]:
    """Every violation under ``root``; only ``LOCK_QUEUE`` may build a recipe (kazoo's, or
    a class of ours deriving from one)."""
    modules = project_modules(root)
    dotted = {p: ".".join(p.relative_to(root).with_suffix("").parts) for p in modules}
    project_recipes = frozenset(
        name for p in modules for name in recipe_subclasses(p.read_text(), dotted[p])
    )
    found: list[str] = []
    for path in modules:
        name = path.relative_to(root).as_posix()
        found += violations_in(
            path.read_text(),
            name,
            recipes_allowed=name == LOCK_QUEUE,
            project_recipes=project_recipes,
        )
    return found


def test_no_module_outside_fencing_writes_to_zookeeper() -> None:
    modules = project_modules()
    assert any(p.parts[-2] == "leader" for p in modules), "the scan must cover leader/"
    found = scan()
    assert found == [], "ZooKeeper writes outside fencing/:\n" + "\n".join(found)


def test_the_lock_queue_exemption_names_the_module_that_builds_the_lock() -> None:
    # An exemption for a module that moved or no longer builds the lock would hide nothing
    # today and anything tomorrow: it must name where the Lock recipe is built now.
    source = (REPO / LOCK_QUEUE).read_text()
    built = violations_in(source, LOCK_QUEUE)
    assert any(v.endswith(": Lock (a recipe)") for v in built), built


def test_the_scan_catches_writes() -> None:
    planted = """
client.create("/storm/storms/x", b"")
self._client.set("/storm/leader-epoch", b"")
zk.transaction().commit()
self._stop.set()
socket.create_connection(("h", 1))
self._writer.delete("/storm/storms/x")
self.client.retry(self.client.delete, "/storm/storms/x")
"""
    found = violations_in(planted, "planted.py")
    # ``self._writer`` is no FencedWriter here: nothing declares it one.
    assert len(found) == 5, found


def test_a_declared_fenced_writer_may_write() -> None:
    planted = """
from fencing import FencedWriter

class Duty:
    def __init__(self, writer: FencedWriter) -> None:
        self._writer = writer

    def run(self, w: FencedWriter) -> None:
        self._writer.delete("/storm/assignments/x")
        w.create("/storm/storms/x", b"")
"""
    assert violations_in(planted, "planted.py") == []


def test_the_scan_catches_writes_through_kazoo_recipes() -> None:
    planted = """
import threading, queue, collections
import kazoo.recipe.counter
from kazoo.recipe import barrier
from kazoo.recipe.lock import Lock, Semaphore as Sem
from kazoo.recipe.watchers import DataWatch
from prometheus_client import Counter

Lock(client, "/storm/leader-lock").acquire()
Sem(client, "/storm/s", max_leases=2)
self._zk.Election("/storm/e").run(lead)
self.client.Counter("/storm/n")
kazoo.recipe.counter.Counter(client, "/storm/n")
barrier.Barrier(client, "/storm/b").wait()
threading.Lock()
queue.Queue()
collections.Counter()
Counter("requests", "help")
DataWatch(client, "/storm/storms", on_data)
"""
    found = violations_in(planted, "planted.py")
    assert len(found) == 6, "\n".join(found)
    assert violations_in(planted, "planted.py", recipes_allowed=True) == []


def test_a_planted_recipe_module_outside_fencing_fails_the_scan(tmp_path: Path) -> None:
    """The whole scan, on a tree with the lock queue and one module that writes through
    kazoo's Lock recipe: the lock queue passes, the other is named."""
    (tmp_path / "leader").mkdir()
    (tmp_path / "pipeline").mkdir()
    (tmp_path / LOCK_QUEUE).write_text(
        "from kazoo.recipe.lock import Lock\nlock = Lock(client, '/storm/leader-lock')\n"
    )
    (tmp_path / "pipeline" / "sneaky.py").write_text(
        "from kazoo.recipe.lock import Lock\n\n"
        "def grab(client):\n"
        "    with Lock(client, '/storm/storms/x'):\n"
        "        pass\n"
    )
    assert scan(tmp_path) == ["pipeline/sneaky.py:4: Lock (a recipe)"]


def test_the_scan_sees_a_recipe_through_a_class_deriving_from_it(tmp_path: Path) -> None:
    """A class of ours deriving from kazoo's Lock is that recipe: deriving from it outside
    the lock queue, or building the lock queue's own class elsewhere, is named."""
    (tmp_path / "leader").mkdir()
    (tmp_path / "pipeline").mkdir()
    (tmp_path / LOCK_QUEUE).write_text(
        "from kazoo.recipe.lock import Lock\n\nclass QueueLock(Lock):\n    pass\n"
    )
    module = LOCK_QUEUE.removesuffix(".py").replace("/", ".")
    (tmp_path / "pipeline" / "sneaky.py").write_text(
        f"from {module} import QueueLock\n"
        "from kazoo.recipe import lock\n\n"
        "class Mine(lock.Lock):\n"
        "    pass\n\n"
        "QueueLock(client, '/storm/storms/x').acquire()\n"
    )
    assert scan(tmp_path) == [
        "pipeline/sneaky.py:4: lock.Lock (a recipe)",
        "pipeline/sneaky.py:7: QueueLock (a recipe)",
    ]
