"""Code distribution: the content-addressed package store, peer download and push, the sync loop.

Every replica keeps a verified copy of each active topology's package and registers as
its holder; the CODE_MISSING duty marks topologies no replica can serve. It imports
``fencing`` and ``cluster`` only; never ``leader`` (the daemon hands the code gate to the
elector), ``pipeline`` or ``nimbus``.
"""
