"""Chaos suite: a real cluster under a client workload, one fault at a time, then checkers."""
