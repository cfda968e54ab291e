"""Configuration: one frozen object, merged from file, environment and flags, validated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cluster.errors import ConfigError
from nimbus.cli import build_parser
from nimbus.cli.cmd_serve import resolve
from nimbus.config import make_config
from tests.cluster import REPO, free_port


def test_flags_beat_environment_beat_file_beat_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = tmp_path / "nimbus.toml"
    config_file.write_text(
        'zookeeper = "file:1"\nroot = "/from-file"\nsession-timeout = 7\nreplicas = 3\n'
    )
    monkeypatch.setenv("NIMBUS_ROOT", "/from-env")
    args = build_parser().parse_args(
        ["serve", "--config", str(config_file), "--session-timeout", "5"]
    )
    values = resolve(args)
    assert values["zookeeper"] == "file:1"  # only in the file
    assert values["root"] == "/from-env"  # env beats file
    assert values["session_timeout"] == 5.0  # flag beats file
    assert values["replicas"] == 3
    assert values["replication_wait"] == 30.0  # default
    values.pop("log_level")
    values.pop("log_format")
    config = make_config(**{**values, "code_dir": Path(values["code_dir"])})
    assert config.replicas == 3 and config.min_replicas == 0  # 0: counted at each submit
    assert config.advertise == "127.0.0.1:6627"  # derived from --listen
    assert config.gc_grace == 2 * 30.0 + 60.0 and config.connect_timeout == 30.0


def test_unknown_file_keys_and_inconsistent_values_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('zookeeper = "z:1"\nsesion-timeout = 3\n')
    with pytest.raises(ConfigError, match="sesion-timeout"):
        resolve(build_parser().parse_args(["serve", "--config", str(bad)]))
    base = {"zookeeper": "z:1", "listen": "127.0.0.1:1"}
    with pytest.raises(ConfigError, match="must exceed the replication wait"):
        make_config(**base, replication_wait=30, gc_grace=10)
    with pytest.raises(ConfigError, match="--min-replicas"):
        make_config(**base, replicas=2, min_replicas=3)
    with pytest.raises(ConfigError, match="--root"):
        make_config(**base, root="storm/")
    with pytest.raises(ConfigError, match="--session-timeout"):
        make_config(**base, session_timeout=0.2)
    with pytest.raises(ConfigError, match="--auth-reads"):
        make_config(**base, auth_reads="maybe")
    with pytest.raises(ConfigError, match="unknown setting"):
        make_config(**base, replica=3)
    # --min-replicas alone is accepted: the replica count is read from /nimbuses.
    assert make_config(**base, min_replicas=2).min_replicas == 2


def test_a_session_timeout_the_server_would_change_is_refused_at_start(
    zk_server: object, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "nimbus.cli", "serve",
            "--zookeeper", zk_server.connect_string,  # type: ignore[attr-defined]
            "--listen", f"127.0.0.1:{free_port()}", "--session-timeout", "100",
            "--code-dir", str(tmp_path / "code"),
        ],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "would become 60 s" in done.stderr
