"""Load a topology package (a folder or a zip with ``topology.py`` at its root).

The package's modules must reach Spark's Python workers, which cannot import a module
the driver loaded from an arbitrary folder (``sc.addPyFile`` was not enough on PySpark
4.3 here). So every module imported from the package folder while ``build()`` runs is
registered with cloudpickle to be pickled by value: functions and sources defined in
the package travel inside the tasks. A module the package imports only later, on a
worker, is not covered; for that, give ``unpack_package``'s folder to
``make_spark(python_path=...)`` (it sets ``spark.executorEnv.PYTHONPATH``).

One package per process: sibling modules are imported by their plain names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import tempfile
import traceback
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from code_sync.errors import PackageRejected, StoreError
from code_sync.package import MAX_ACCEPTED_PACKAGE_BYTES, TOPOLOGY_ENTRY, validate_package
from pipeline.errors import PackageError, TopologyError
from pipeline.graph import Topology

#: Largest zip accepted here; the code store applies the cluster's own limit at submit.
MAX_PACKAGE_BYTES = MAX_ACCEPTED_PACKAGE_BYTES


def unpack_package(package: str | Path, dest: str | Path | None = None) -> Path:
    """The folder holding the package's ``topology.py``; a zip is checked and unpacked first.

    A zip goes to ``dest`` (a new temporary folder by default, left in place: the
    topology may read data files from it while it runs).
    """
    path = Path(package)
    if path.is_dir():
        root = path
    elif path.is_file():
        try:
            validate_package(path, max_bytes=MAX_PACKAGE_BYTES)
        except (PackageRejected, StoreError) as e:
            raise PackageError(f"package {path} is not a usable zip: {e}") from e
        root = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="nimbus-pkg-"))
        try:
            root.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(path) as archive:
                archive.extractall(root)  # names were checked: none leaves ``root``
        except (OSError, zipfile.BadZipFile) as e:
            raise PackageError(f"could not unpack {path} into {root}: {e}") from e
    else:
        raise PackageError(f"no topology package at {path}")
    if not (root / TOPOLOGY_ENTRY).is_file():
        raise PackageError(f"package {path} has no {TOPOLOGY_ENTRY} at its root")
    return root.resolve()


def load_topology(
    package: str | Path,
    *,
    unpack_to: str | Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> Topology:
    """Import the package's ``topology.py``, call ``build(config)`` (or ``build()`` when
    it takes no argument) and return its topology.

    ``config`` is the topology config submitted with it (``nimbus submit --config-json``),
    a fresh dict on every call, ``{}`` when none was given. Raises ``TopologyError`` when
    the topology is malformed and ``PackageError`` when the package cannot be opened or
    imported, or ``build()`` fails or returns something else.
    """
    root = unpack_package(package, unpack_to)
    module = _import_topology_module(root)
    build = getattr(module, "build", None)
    if not callable(build):
        raise PackageError(f"{root / TOPOLOGY_ENTRY} defines no build() function")
    try:
        topology = build(dict(config or {})) if _takes_config(build) else build()
    except TopologyError:
        raise
    except (Exception, SystemExit) as e:
        raise PackageError(f"build() failed: {user_error(e, root)}") from e
    finally:
        _pickle_package_by_value(root)
    if not isinstance(topology, Topology):
        raise PackageError(
            f"build() in {root / TOPOLOGY_ENTRY} returned {type(topology).__name__}, "
            "not a Topology (use pipeline.api.TopologyBuilder and return builder.build())"
        )
    return topology


def _takes_config(build: Callable[..., Any]) -> bool:
    """Whether ``build`` accepts one positional argument: the topology config."""
    try:
        parameters = inspect.signature(build).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): call it bare
        return False
    positional = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )
    return any(p.kind in positional for p in parameters)


def _import_topology_module(root: Path) -> ModuleType:
    # A name of our own: "topology" is a PyPI project, and the module must not shadow it.
    name = "nimbus_topology_" + hashlib.sha256(str(root).encode()).hexdigest()[:16]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    spec = importlib.util.spec_from_file_location(name, root / TOPOLOGY_ENTRY)
    if spec is None or spec.loader is None:
        raise PackageError(f"cannot import {root / TOPOLOGY_ENTRY}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # cloudpickle and dataclasses look modules up here
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[name]
        raise PackageError(f"importing {TOPOLOGY_ENTRY} failed: {user_error(e, root)}") from e
    return module


def user_error(e: BaseException, root: Path) -> str:
    """An error in the package's code as its author wants it: the package's own file names
    (not where it was unpacked), the line, and the frames of the package's code."""
    if isinstance(e, SyntaxError):
        where = _relative(e.filename or TOPOLOGY_ENTRY, root)
        text = f"{where} line {e.lineno}: {e.msg}"
        if e.text:
            caret = " " * max(0, (e.offset or 1) - 1) + "^"
            text += f"\n    {e.text.rstrip()}\n    {caret}"
        return text
    frames = [
        f"  {_relative(f.filename, root)} line {f.lineno}, in {f.name}: {(f.line or '').strip()}"
        for f in traceback.extract_tb(e.__traceback__)
        if Path(f.filename).resolve().is_relative_to(root)
    ]
    return "\n".join([f"{type(e).__name__}: {e}", *frames])


def _relative(filename: str, root: Path) -> str:
    path = Path(filename).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else filename


def _pickle_package_by_value(root: Path) -> None:
    # Imported here: every `nimbus` command imports this module (via the supervisor), and
    # only a worker loading a package needs pyspark (0.1 s and ~10 MiB to import).
    from pyspark import cloudpickle

    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if origin and Path(origin).resolve().is_relative_to(root):
            cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
