"""The alert callback of Weir's DAGs: a failed task (a spent restart budget, a failed DQ check,
a failed back-fill) is logged at ERROR, written to the event log as an `alert`, and sent to the
alert sink (`spark_jobs.control.alerts`: `WEIR_HOME/logs/alerts.jsonl`)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from spark_jobs.control import alerts, eventlog
from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


PIPELINE_TAG = "pipeline:"


def pipeline_tag(name: str) -> str:
    """The tag that names a DAG's pipeline (the DAG id does not: `P_checkpoint_backup`)."""
    return f"{PIPELINE_TAG}{name}"


def pipeline_of(dag: Any, params: dict[str, Any]) -> str:
    """The pipeline a DAG serves: its `pipeline:` tag, else a `pipeline` param, else "?"."""
    for tag in sorted(getattr(dag, "tags", None) or ()):
        if tag.startswith(PIPELINE_TAG):
            return tag.removeprefix(PIPELINE_TAG)
    return str(params.get("pipeline") or "?")


def alert_on_failure(context: Any) -> None:
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag") or getattr(getattr(ti, "task", None), "dag", None)
    dag_id = getattr(ti, "dag_id", None) or getattr(dag, "dag_id", "?")
    task_id = getattr(ti, "task_id", "?")
    pipeline = pipeline_of(dag, context.get("params") or {})
    error = context.get("exception")
    alert = {"at": dt.datetime.now(dt.UTC).isoformat(), "pipeline": pipeline, "dag_id": dag_id,
             "task_id": task_id, "run_id": getattr(context.get("dag_run"), "run_id", None),
             "error": str(error) if error else None}
    home = WeirHome.from_env()
    try:
        alerts.send(home, alert)
        eventlog.record(pipeline, "alert", "sent", actor="airflow", reason=alert["error"],
                        details=alert, home=home)
    except Exception:  # an alert must never mask the failure it reports
        log.exception("could not record the alert for %s.%s", dag_id, task_id)
