"""A worker's sinks before its first batch: fenced by its claim, folders its own."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pipeline.commits import Committer
from pipeline.graph import Topology
from pipeline.sinks import CallbackSink, FileSink, adopt_folder

log = logging.getLogger(__name__)


def adopt_sink_folders(
    topology: Topology, topology_id: str, is_live: Callable[[str], bool]
) -> None:
    """Every file sink's folder holds this topology's batches only (``adopt_folder``)."""
    for spec in topology.sinks:
        sink = spec.component
        if isinstance(sink, FileSink):
            moved = adopt_folder(sink.folder, topology_id, is_live)
            if moved:
                log.warning("sink %r: %s", spec.name, moved)


def fence_sinks(topology: Topology, committer: Committer) -> None:
    """Make every sink of ``topology`` publish only under the worker's claim."""
    for spec in topology.sinks:
        sink = spec.component
        if isinstance(sink, FileSink | CallbackSink):
            sink.fence = committer.for_sink(spec.name)
        else:
            log.warning("sink %r (%s) is not fenced", spec.name, type(sink).__name__)
