"""The layers of docs/design.md hold: checked from the imports and the string literals.

``devtools`` > ``nimbus`` > ``pipeline`` > ``leader | code_sync`` > ``fencing`` > ``cluster``:
the import-linter contract in ``pyproject.toml`` says it, and these tests run it (and prove
it fails on a wrong import), find import cycles, and find layout paths built, or lock
nodes named or recognised, outside ``cluster/paths.py``.
"""

from __future__ import annotations

import ast
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from cluster.paths import Paths

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "fencing", "leader", "code_sync", "pipeline", "nimbus", "devtools")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def run_contracts(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_the_layer_contract_holds() -> None:
    done = run_contracts(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_wrong_import_breaks_the_contract_and_is_named(tmp_path: Path) -> None:
    """Planted: the bottom layer importing the daemon. The contract must name the line."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    ops = tmp_path / "fencing" / "ops.py"
    ops.write_text(ops.read_text() + "\nfrom nimbus import config as _wrong  # noqa\n")
    done = run_contracts(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout
    assert "fencing.ops -> nimbus.config" in done.stdout, done.stdout


def _import_graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [
            (root, sorted(graph.find_modules_directly_imported_by(root)))
        ]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_the_product_packages() -> None:
    graph = _import_graph()
    # A package's __init__ re-exporting its own modules is not a cycle between modules.
    for package in PACKAGES:
        for module in graph.find_children(package):
            if graph.direct_import_exists(importer=package, imported=module):
                graph.remove_import(importer=package, imported=module)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = grimp.ImportGraph()
    for a, b in (("x.a", "x.b"), ("x.b", "x.c"), ("x.c", "x.a"), ("x.c", "x.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["x.a", "x.b", "x.c"]]


def _layout_folders() -> list[str]:
    paths = Paths("/r")
    names = {p.removeprefix("/r/") for p in paths.folders()}
    names |= {paths.claims, paths.commits, paths.credentials, paths.leader_epoch}
    return sorted(n.removeprefix("/r/") for n in names)


_LAYOUT = re.compile(r"^/(" + "|".join(map(re.escape, _layout_folders())) + r")(/|$)")
#: ``Paths`` properties naming a folder: ``f"{paths.errors}/{id}"`` builds a path by hand.
_FOLDER_PROPERTIES = {
    name for name, value in vars(Paths).items() if isinstance(value, property)
} - {"root"}


def _hand_joined(node: ast.JoinedStr) -> bool:
    parts = node.values
    for part, after in itertools.pairwise(parts):
        if (
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Attribute)
            and part.value.attr in _FOLDER_PROPERTIES
            and isinstance(after, ast.Constant)
            and str(after.value).startswith("/")
        ):
            return True
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def layout_literals(source: str, filename: str) -> list[str]:
    """Non-docstring string literals (f-string parts included) naming a layout folder."""
    tree = ast.parse(source, filename)
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _LAYOUT.search(node.value)
        ):
            found.append(f"{filename}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr) and _hand_joined(node):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_cluster_paths_builds_layout_paths() -> None:
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "cluster/paths.py" or "/api/v1/" in rel:
                continue
            found += layout_literals(path.read_text(encoding="utf-8"), rel)
    assert found == []


#: Where the lock-node rules are scanned for: the product packages and the benches.
LOCK_NODE_SCANNED = (*PACKAGES, "bench")
#: kazoo's Lock names its nodes ``<uuid>__lock__<sequence>``.
_LOCK_MARK = "__lock__"


def _is_node_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "node"


def _lock_node_built(node: ast.AST) -> bool:
    """``f"{lock.path}/{lock.node}"`` or ``lock.path + "/" + lock.node``: a lock's node path."""
    if isinstance(node, ast.JoinedStr):
        return any(
            isinstance(part, ast.Constant)
            and str(part.value).endswith("/")
            and isinstance(after, ast.FormattedValue)
            and _is_node_attr(after.value)
            for part, after in itertools.pairwise(node.values)
        )
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and (_is_node_attr(node.left) or _is_node_attr(node.right))
    )


def _lock_node_tested(node: ast.AST) -> bool:
    """``path.startswith(paths.leader_lock ...)``: "is this a lock node" by hand."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("startswith", "removeprefix", "partition", "rpartition")
        and any(
            isinstance(sub, ast.Attribute) and sub.attr == "leader_lock"
            for arg in node.args
            for sub in ast.walk(arg)
        )
    )


def lock_node_handling(source: str, filename: str) -> list[str]:
    """Lock-node paths built, or lock nodes recognised, by hand (not by ``Paths``)."""
    tree = ast.parse(source, filename)
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        marked = (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _LOCK_MARK in node.value
        )
        if marked or _lock_node_built(node) or _lock_node_tested(node):
            found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return found


def test_only_cluster_paths_names_lock_nodes() -> None:
    found: list[str] = []
    for package in LOCK_NODE_SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "cluster/paths.py" or "/api/v1/" in rel:
                continue
            found += lock_node_handling(path.read_text(encoding="utf-8"), rel)
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'node = f"{lock.path}/{lock.node}"',
        'node = lock.path + "/" + lock.node',
        'ok = lock_node.startswith(paths.leader_lock + "/")',
        'ours = [c for c in children if "__lock__" in c]',
    ],
)
def test_the_lock_node_scan_catches_a_hand_made_one(source: str) -> None:
    assert lock_node_handling(source, "planted.py") != []


@pytest.mark.parametrize(
    "source",
    [
        'x = f"{root}/leader-epoch"',
        'EPOCHS = "/epochs"',
        'p = f"{self._paths.errors}/{topology_id}"',
        'p = f"{paths.storms}/{i}"',
    ],
)
def test_the_layout_scan_catches_a_hand_built_path(source: str) -> None:
    assert layout_literals(source, "planted.py") != []


def test_every_package_says_its_job_and_what_it_may_import() -> None:
    for package in PACKAGES:
        tree = ast.parse((REPO / package / "__init__.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree)
        assert doc and "import" in doc, f"{package}/__init__.py: no docstring naming its imports"


#: Modules of one purpose (the developers' guide): no Python file of ours over this.
MODULE_MAX_LINES = 450


def oversized(paths: list[Path], limit: int = MODULE_MAX_LINES) -> list[str]:
    """``path: lines`` of each file longer than ``limit`` lines."""
    sizes = ((p, len(p.read_text(encoding="utf-8").splitlines())) for p in paths)
    return [
        f"{p.relative_to(REPO) if p.is_relative_to(REPO) else p}: {n}"
        for p, n in sizes
        if n > limit
    ]


def our_python_files() -> list[Path]:
    """Every Python file git tracks, but the protobuf compiler's output."""
    names = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / n for n in names if not n.endswith(("_pb2.py", "_pb2_grpc.py"))]


def test_no_module_is_over_its_budget(tmp_path: Path) -> None:
    files = our_python_files()
    assert len(files) > 100 and REPO / "leader" / "term.py" in files
    assert oversized(files) == []
    planted = tmp_path / "big.py"  # the check can fail: one line over is named
    planted.write_text("x = 1\n" * (MODULE_MAX_LINES + 1))
    assert oversized([planted]) == [f"{planted}: {MODULE_MAX_LINES + 1}"]
