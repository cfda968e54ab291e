"""A worker's sinks before its first batch: fenced by its claim, folders its own."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from pipeline.commits import Committer
from pipeline.graph import Topology
from pipeline.lineage import sink_checkpoint
from pipeline.sinks import CallbackSink, FileSink, GivesUp, adopt_folder

log = logging.getLogger(__name__)


def adopt_sink_folders(topology: Topology, topology_id: str, gives_up: GivesUp) -> None:
    """Every file sink's folder holds this topology's batches only (``adopt_folder``)."""
    for spec in topology.sinks:
        sink = spec.component
        if isinstance(sink, FileSink):
            moved = adopt_folder(sink.folder, topology_id, gives_up)
            if moved:
                log.warning("sink %r: %s", spec.name, moved)


def sink_checkpoints(topology: Topology, shared: Path | None) -> Mapping[str, Path]:
    """Where each sink's query keeps its checkpoint.

    A file sink's beside its output (``pipeline.lineage``), so a slot that moves to any
    supervisor resumes it; other sinks' in ``shared`` (``--checkpoint-dir``) when given.
    An explicit ``shared`` folder holds every sink's, file sinks' too.
    """
    found: dict[str, Path] = {}
    for spec in topology.sinks:
        sink = spec.component
        if shared is not None:
            found[spec.name] = shared / spec.name
        elif isinstance(sink, FileSink):
            found[spec.name] = sink_checkpoint(sink.folder)
    return found


def fence_sinks(topology: Topology, committer: Committer) -> None:
    """Make every sink of ``topology`` publish only under the worker's claim."""
    for spec in topology.sinks:
        sink = spec.component
        if isinstance(sink, FileSink | CallbackSink):
            sink.fence = committer.for_sink(spec.name)
        else:
            log.warning("sink %r (%s) is not fenced", spec.name, type(sink).__name__)
