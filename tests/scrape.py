"""Reading a /metrics endpoint the way Prometheus does: over HTTP, parsed by its parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, host: str = "127.0.0.1") -> tuple[str, Samples]:
    """The exposition text and its samples keyed by (name, labels)."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, samples


class MissingMetric(AssertionError):
    """The exposition has no such sample: a renamed metric must fail the test, not read 0."""


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a missing sample fails (every metric here is exported from the
    start, counters included, so absence means a rename or a lost registration)."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        near = sorted({n for n, _ in samples if n.split("_")[:2] == name.split("_")[:2]})
        raise MissingMetric(f"no sample {name}{dict(labels) or ''}; similar: {near[:8]}")
    return samples[key]


def metric(port: int, name: str, **labels: str) -> float:
    return value(scrape(port)[1], name, **labels)
