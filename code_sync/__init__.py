"""Code distribution: content-addressed package store, peer download, replica registry.

Filled in by the code distribution issue; until then the elector's code gate is a
callable passed in by the daemon.
"""
