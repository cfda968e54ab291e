#!/usr/bin/env python3
"""Regenerate the committed Python stubs from the .proto files under proto/.

The one way to make the stubs (DESIGN.md, "Where code lives"); tests/test_proto.py runs it
into a temporary directory and fails when the committed files differ.

    python proto/generate.py            # writes cluster/api/v1/*_pb2*.py{,i} in the repo
    python proto/generate.py --out DIR  # writes DIR/nimbus/api/v1/... instead

What is produced, per .proto file ``proto/nimbus/api/v1/<name>.proto``, in ``cluster/api/v1``
(the .proto paths stay where clients find them; the generated imports are rewritten from
``nimbus.api.v1`` to ``cluster.api.v1``, the bottom layer that every package may import):

- ``<name>_pb2.py``       messages (protoc ``--python_out``)
- ``<name>_pb2.pyi``      message types (protoc's built-in ``--pyi_out``)
- ``<name>_pb2_grpc.py``  service stub and servicer (grpc_tools ``--grpc_python_out``)
- ``<name>_pb2_grpc.pyi`` their types (mypy-protobuf's ``protoc-gen-mypy_grpc``)

The two ``_pb2_grpc`` files are kept only for a .proto that declares a ``service``
(grpc_tools and mypy-protobuf emit an empty one for every file; records.proto has none).

Output is deterministic: .proto files are passed in sorted order, protoc and both plugins
emit no timestamps or absolute paths, and files are written byte for byte. The generator
runs in a scratch directory first and then syncs it into the output package directory, so
a failed run leaves the old stubs alone and stubs of a deleted .proto are removed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PROTO_ROOT.parent
# Where the .proto files sit under proto/ (and so where protoc writes, mirroring them).
PACKAGE_DIR = Path("nimbus", "api", "v1")
# Where the stubs are kept, relative to the output root: the bottom layer's API package.
OUTPUT_DIR = Path("cluster", "api", "v1")
_IMPORT = re.compile(rb"\bnimbus\.api\.v1\b")
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def proto_files() -> list[str]:
    """The .proto files to compile, relative to proto/ (sorted, for stable output)."""
    files = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    outside = [f for f in files if Path(f).parent != PACKAGE_DIR]
    if outside:
        # Everything imports the API from one package (cluster.api); keep it that way.
        raise SystemExit(f"{', '.join(outside)}: .proto files belong in proto/{PACKAGE_DIR}")
    return files


_SERVICE = re.compile(r"^\s*service\s+\w+", re.MULTILINE)


def expected_outputs() -> list[str]:
    """File names this script keeps, for each .proto (in PACKAGE_DIR)."""
    names: list[str] = []
    for rel in proto_files():
        stem = Path(rel).stem
        names += [f"{stem}_pb2.py", f"{stem}_pb2.pyi"]
        if _SERVICE.search((PROTO_ROOT / rel).read_text(encoding="utf-8")):
            names += [f"{stem}_pb2_grpc.py", f"{stem}_pb2_grpc.pyi"]
    return sorted(names)


def _mypy_grpc_plugin() -> Path:
    """protoc-gen-mypy_grpc from the running interpreter's environment (the venv bin dir)."""
    name = "protoc-gen-mypy_grpc"
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return candidate
    found = shutil.which(name)
    if found is None:
        raise SystemExit(
            f"{name} not found next to {sys.executable} or on PATH; "
            "install mypy-protobuf (pip install -e '.[test]')"
        )
    return Path(found)


def _grpc_tools_include() -> Path:
    """Directory of the well-known .proto files bundled with grpc_tools."""
    import grpc_tools  # imported here so --help works without grpcio-tools

    return Path(grpc_tools.__file__).resolve().parent / "_proto"


def is_generated(path: Path) -> bool:
    """True for a file name this script produces (other than the package __init__.py)."""
    return path.name.endswith(GENERATED_SUFFIXES)


def run_protoc(out_root: Path) -> None:
    """Run protoc with all four outputs into ``out_root`` (which must exist)."""
    out = str(out_root)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={_grpc_tools_include()}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy_grpc={_mypy_grpc_plugin()}",
        f"--mypy_grpc_out={out}",
        *proto_files(),
    ]
    # cwd=proto/ so file names in the generated code are the relative .proto paths.
    result = subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"protoc failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
        )


def generate(out_root: Path) -> list[Path]:
    """Generate the stubs under ``out_root / cluster/api/v1``; return the files written.

    Files whose bytes are unchanged are left untouched; generated files with no source
    .proto any more are deleted. ``__init__.py`` is created empty when missing.
    """
    target = out_root / OUTPUT_DIR
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nimbus-protoc-") as scratch:
        scratch_root = Path(scratch)
        run_protoc(scratch_root)
        wanted = expected_outputs()
        missing = [n for n in wanted if not (scratch_root / PACKAGE_DIR / n).is_file()]
        if missing:
            raise SystemExit(f"protoc did not produce {', '.join(missing)} under {PACKAGE_DIR}")
        produced = {
            n: _IMPORT.sub(b"cluster.api.v1", (scratch_root / PACKAGE_DIR / n).read_bytes())
            for n in wanted
        }

    written: list[Path] = []
    for name, data in produced.items():
        dest = target / name
        if not dest.is_file() or dest.read_bytes() != data:
            dest.write_bytes(data)
            written.append(dest)
    for stale in sorted(target.iterdir()):
        if stale.is_file() and is_generated(stale) and stale.name not in produced:
            stale.unlink()
            written.append(stale)
    init = target / "__init__.py"
    if not init.exists():
        init.write_bytes(b"")
        written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT,
        help=f"output root; stubs go to OUT/{OUTPUT_DIR.as_posix()} (default: the repo root)",
    )
    args = parser.parse_args(argv)
    changed = generate(args.out.resolve())
    target = args.out.resolve() / OUTPUT_DIR
    if changed:
        for path in changed:
            print(f"updated {path}")
    else:
        print(f"up to date: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
