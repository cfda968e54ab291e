"""Pipelines: the spout/bolt API, its compiler to Spark Structured Streaming, workers.

- ``pipeline.api``: ``TopologyBuilder`` and the built-in spouts, bolts and sinks;
- ``pipeline.compiler``: validation (no Spark needed) and compilation to queries;
- ``pipeline.runner``: ``run()`` starts a topology's queries; the handle stops them;
- ``pipeline.session``: ``make_spark()``, the SparkSession settings this project needs;
- ``pipeline.package``: ``load_topology()`` for a package folder or zip;
- ``pipeline.supervisor``: keeps the slots the leader assigned to this host.

It imports ``code_sync``, ``fencing`` and ``cluster``; never ``leader`` or ``nimbus``.
"""
