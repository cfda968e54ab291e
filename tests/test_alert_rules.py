"""The alert rules (deploy/prometheus/rules.yaml) are tested, use real metric names and
are documented; the Grafana dashboard (deploy/grafana/nimbus.json) reads real names too.

promtool runs the rules' unit tests; without promtool the test fails, never skips
(``deploy/local/promtool.sh`` installs it): an alert nobody tested must not pass CI. The
other tests hold the three files together: every rule has a case that fires it and one
that must not, every metric a rule or a dashboard panel reads is one a replica exports,
every panel's query parses, and every alert has its section in docs/alerts.md.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from fencing import LeadershipToken
from leader.heartbeat import BeatAck
from nimbus.duties.failing import REASONS
from tests.cluster import REPO
from tests.test_alert_metrics import replica_metrics
from tests.test_docs import anchors

RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
RULES_TEST = REPO / "deploy" / "prometheus" / "rules_test.yaml"
ALERTS_DOC = REPO / "docs" / "alerts.md"
DASHBOARD = REPO / "deploy" / "grafana" / "nimbus.json"
METRIC = re.compile(r"\bnimbus_[a-z_]+")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _load(RULES)["groups"] for rule in group["rules"]]


def _panel_queries() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run deploy/local/promtool.sh as root"
    return subprocess.run(
        [promtool, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_promtool_passes_every_rules_unit_test() -> None:
    result = _promtool("test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each panel's query, given to it as a recording rule."""
    records = [{"record": f"panel:q{i}", "expr": q} for i, q in enumerate(_panel_queries())]
    rules = tmp_path / "panels.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": records}]}))
    result = _promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_has_a_case_that_fires_it_and_one_that_must_not() -> None:
    fires: set[str] = set()
    spares: set[str] = set()
    for case in _load(RULES_TEST)["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else spares).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert len(alerts) == len(_rules()), "alert names are unique"
    assert alerts - fires == set(), "rules no test fires"
    assert alerts - spares == set(), "rules no test expects to stay quiet"
    assert (fires | spares) - alerts == set(), "tests of rules that do not exist"


def test_every_metric_a_rule_or_a_panel_reads_is_exported_by_a_replica() -> None:
    metrics = replica_metrics(leading=True)
    # Series that appear with their first event: make each event happen once.
    metrics.topologies_failing(dict.fromkeys(REASONS, 0), LeadershipToken("/n-1", epoch=1))
    metrics.left_zookeeper_server("zk-1:2181")
    metrics.beat_acked(BeatAck(sent=1.0, acked=1.01, lease=0.6))
    metrics.grpc_call("/storm.nimbus.v1.Nimbus/ListTopologies", "OK", 0.01)
    exported = {s.name for family in metrics.registry.collect() for s in family.samples}
    queries = [rule["expr"] for rule in _rules()] + _panel_queries()
    read = {name for query in queries for name in METRIC.findall(query)}
    assert read, "the queries read nimbus_* metrics"
    assert read - exported == set(), f"not exported: {sorted(read - exported)}"


def test_every_alert_has_its_section_in_the_docs_and_its_runbook_link_resolves() -> None:
    sections = anchors(ALERTS_DOC)
    for rule in _rules():
        name = rule["alert"]
        assert name.lower() in sections, f"docs/alerts.md has no '## {name}'"
        assert rule["annotations"]["runbook"] == f"docs/alerts.md#{name.lower()}"
        assert rule["labels"]["severity"] in {"critical", "warning"}
