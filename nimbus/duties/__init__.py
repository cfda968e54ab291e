"""What the leader does, fenced: the changes it makes on request and the duties it runs.

On request: ``submission`` (store, replicate, then one fenced publish; ``package_check``
runs the package's ``build()`` in a sandboxed child) and ``lifecycle`` (kill, activate,
deactivate, rebalance), each remembered by its client request id (``requests``). As
duties, while the leader's token lives: the ``scheduler`` (pure ``planning`` inside), the
lifecycle duty, the orphan ``sweeper`` and the ``failure_log``.

Nothing here imports the server or the CLI above it.
"""
