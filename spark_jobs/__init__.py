"""Weir: long-running Spark Structured Streaming pipelines on Delta Lake, operated from Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
