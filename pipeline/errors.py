"""Exception types of the pipeline runtime; each keeps its cause (``raise ... from e``)."""

from __future__ import annotations

from cluster.errors import NimbusError


class PipelineError(NimbusError):
    """Base of every error the spout/bolt API, its compiler and its runner raise."""


class TopologyError(PipelineError):
    """The topology is malformed; the message names the component and the problem.

    Raised before anything runs (validation), or when Spark refuses a component while the
    query is being planned (an SQL expression naming an unknown column, for instance).
    """

    def __init__(self, component: str | None, problem: str) -> None:
        self.component = component
        self.problem = problem
        super().__init__(f"{component!r}: {problem}" if component else problem)


class PackageError(PipelineError):
    """A topology package could not be opened, imported, or its ``build()`` failed."""


class PipelineRunError(PipelineError):
    """A running topology's streaming query failed or could not be started or stopped."""


class SinkError(PipelineError):
    """A sink could not publish a micro-batch's output."""


class UnaccountedBatchError(SinkError):
    """A sink found a batch published that this worker's checkpoint did not publish.

    Nothing was written: resuming from another checkpoint would skip or repeat rows.
    """
