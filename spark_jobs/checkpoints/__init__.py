"""Checkpoint management: inspect, validate, back up, restore, rewind, reset, prune and check
the compatibility of a pipeline's streaming checkpoints. `run_action` is the one entry point,
shared by `weir checkpoint` and the Airflow DAGs."""

from __future__ import annotations

from spark_jobs.checkpoints.actions import ACTIONS, DESTRUCTIVE, run_action

__all__ = ["ACTIONS", "DESTRUCTIVE", "run_action"]
