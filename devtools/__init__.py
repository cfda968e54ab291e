"""Developer tooling, apart from the service: nothing in a replica imports it.

The embedded ZooKeeper launcher (``zkserver``: the ensemble; ``zklocate``: Java, jars,
ports and probes; ``zkspawn``: the server JVMs), the fault proxy the chaos tests use
(``faultproxy``, its event loop in ``faultloop``), and the ``nimbus dev`` and
``nimbus zookeeper`` subcommands, which join the ``nimbus`` CLI through the
``nimbus.commands`` entry points. It may import every layer.
"""
