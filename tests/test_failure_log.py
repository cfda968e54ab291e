"""Worker failures reported in heartbeats become fenced topology errors, each once."""

from __future__ import annotations

from kazoo.client import KazooClient

from cluster.api import records
from cluster.paths import Paths
from fencing.error_log import ERRORS_KEPT
from nimbus.duties.failure_log import COMPONENT, FailureLog
from pipeline.failures import one_line
from tests.replica_fixtures import ROOT
from tests.test_scheduler_duty import lead

PATHS = Paths(ROOT)
Beat = tuple[str, str, records.WorkerHeartbeat]


def _beat(tid: str, slot: str, error: str, restarts: int) -> Beat:
    """A slot's heartbeat as the scheduler's pass read it: (topology id, slot, beat)."""
    beat = records.WorkerHeartbeat(
        topology_id=tid, last_error=error, restarts=restarts, failures_in_a_row=restarts
    )
    return (tid, slot, beat)


def _logged(client: KazooClient, tid: str) -> list[str]:
    folder = PATHS.component_errors(tid, COMPONENT)
    names = sorted(client.get_children(folder)) if client.exists(folder) else []
    return [
        records.ErrorInfo.FromString(
            client.get(PATHS.component_error(tid, COMPONENT, n))[0]
        ).message
        for n in names
    ]


def test_each_reported_failure_is_logged_once_and_the_log_stays_bounded(
    zk_client: KazooClient,
) -> None:
    _, writer = lead(zk_client, "leader:1")
    log = FailureLog(zk_client, PATHS, writer, wall_ms=lambda: 7)
    beats = [_beat("wc-1", "sup-a-0", "ValueError: short row", 1)]
    beats.append(_beat("ok-1", "sup-b-0", "", 0))  # a healthy slot: nothing to log
    assert log.record_new(beats) == ["wc-1: sup-a-0: ValueError: short row (1 restart(s))"]
    assert log.record_new(beats) == [], "the same failure is logged once"
    beats[0] = _beat("wc-1", "sup-a-0", "ValueError: short row", 2)
    assert len(log.record_new(beats)) == 1
    assert _logged(zk_client, "wc-1") == [
        "sup-a-0: ValueError: short row (1 restart(s))",
        "sup-a-0: ValueError: short row (2 restart(s))",
    ]
    first = sorted(zk_client.get_children(PATHS.component_errors("wc-1", COMPONENT)))[0]
    stored = zk_client.get(PATHS.component_error("wc-1", COMPONENT, first))[0]
    assert records.ErrorInfo.FromString(stored).epoch == writer.token.epoch, "fenced, stamped"
    # A new leader does not log again what an earlier one did.
    assert FailureLog(zk_client, PATHS, writer).record_new(beats) == []
    for restarts in range(3, 3 + ERRORS_KEPT + 2):
        log.record_new([_beat("wc-1", "sup-a-0", "ValueError: short row", restarts)])
    assert len(_logged(zk_client, "wc-1")) == ERRORS_KEPT


def test_the_line_shown_is_the_python_errors_own() -> None:
    spark = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted.\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/pkg/topology.py", line 9, in checked\n'
        "    raise ValueError(f'short row {line!r}')\n"
        "ValueError: short row 'a,b': 3 fields expected\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(x.scala:1)\n"
    )
    assert one_line(spark) == "ValueError: short row 'a,b': 3 fields expected"
    assert one_line(RuntimeError("first line\nsecond")) == "first line"
    assert one_line(KeyError()) == "KeyError"
    assert len(one_line("x" * 5000)) == 500
