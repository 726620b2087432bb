"""The on-call Params of `P_stop` and `P_restart` reach their operators rendered, with their
types: a template field the operator does not declare stays the literal "{{ params.x }}" text
(`P_stop` failed on its timeout that way, and `P_restart` could never confirm a restore)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow
P = "playback"


def dags() -> dict:
    from weir_airflow.dag_factory import pipeline_dags

    return pipeline_dags(P)


def test_stop_params_reach_the_operator() -> None:
    stop = dags()[f"{P}_stop"].get_task("stop")
    stop.render_template_fields({"params": {"reason": "maintenance window", "graceful_timeout_s": 45}})
    assert (stop.reason, stop.graceful_timeout_s) == ("maintenance window", 45)


def test_restart_params_reach_the_operator() -> None:
    restart = dags()[f"{P}_restart"].get_task("restart")
    restart.render_template_fields({"params": {"reason": "INC-9", "mode": "reset", "backup_id": None,
                                               "reset_from": "latest", "confirm": True}})
    assert (restart.reason, restart.mode, restart.backup_id, restart.reset_from, restart.confirm) == (
        "INC-9", "reset", None, "latest", True)
