"""Pipelines: the spout/bolt API, its compiler to Spark Structured Streaming, workers.

Filled in by the pipelines issue.
"""
