"""The smallest valid topology package source, for tests, benchmarks and demos.

The leader validates every submitted package (``nimbus.duties.package_check``), so a package
that only exists to exercise code distribution or the lifecycle still needs a real
``build()``: a rate spout feeding the console sink.
"""

from __future__ import annotations

MINIMAL_TOPOLOGY = b'''"""A rate spout printed to the console: the smallest valid topology."""

from pipeline.api import ConsoleSink, RateSpout, Topology, TopologyBuilder


def build() -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("ticks", RateSpout(1))
    builder.set_bolt("print", ConsoleSink()).shuffle_grouping("ticks")
    return builder.build()
'''
