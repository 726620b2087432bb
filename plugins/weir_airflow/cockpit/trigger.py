"""Trigger an action's DAG through Airflow's own REST API, as the signed-in user: the cockpit
forwards the user's token (the UI login's cookie or the request's bearer token), so Airflow
checks that user's permission to trigger that DAG and records them as the run's triggerer."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

from spark_jobs.cockpit.actions import Action

# A back-fill from the cockpit redoes every date of its range, also the ones already done.
BACKFILL_REPROCESS = "completed"
BACKFILL_MAX_ACTIVE_RUNS = 2
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Triggered:
    """What Airflow answered: the new run (or back-fill) and its page in the UI (relative to the
    UI's root), or the refusal (status and Airflow's own message)."""

    ok: bool
    status: int
    what: str
    ui_path: str | None = None
    detail: Any = None


def user_token(headers: dict[str, str], cookies: dict[str, str]) -> str | None:
    """The credential the request came with, in Airflow's order: a bearer token, else the
    UI login's `_token` cookie."""

    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value
    return cookies.get(COOKIE_NAME_JWT_TOKEN)


def request_of(action: Action, conf: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The REST call (path under the API root, JSON body) that starts `action` with `conf`."""
    if action.backfill:
        return "api/v2/backfills", {
            "dag_id": action.dag_id, "from_date": _midnight(conf["from_date"]),
            "to_date": _midnight(conf["to_date"]), "reprocess_behavior": BACKFILL_REPROCESS,
            "max_active_runs": BACKFILL_MAX_ACTIVE_RUNS}
    return f"api/v2/dags/{quote(action.dag_id)}/dagRuns", {"logical_date": None, "conf": conf}


async def trigger(action: Action, conf: dict[str, Any], *, airflow_url: str, token: str) -> Triggered:
    """POST the action's run (or back-fill) to Airflow at `airflow_url` (its root, ending in /)."""

    path, body = request_of(action, conf)
    async with httpx.AsyncClient(base_url=airflow_url, timeout=TIMEOUT_S) as client:
        answer = await client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
    try:
        payload = answer.json()
    except ValueError:
        payload = answer.text[:500]
    if answer.status_code >= 400:
        detail = payload.get("detail", payload) if isinstance(payload, dict) else payload
        return Triggered(False, answer.status_code, action.dag_id, detail=detail)
    if action.backfill:
        return Triggered(True, answer.status_code, f"back-fill {payload.get('id')} of {action.dag_id}",
                         f"dags/{quote(action.dag_id)}/backfills", payload)
    run_id = payload["dag_run_id"]
    return Triggered(True, answer.status_code, f"run {run_id} of {action.dag_id}",
                     f"dags/{quote(action.dag_id)}/runs/{quote(run_id, safe='')}", payload)


def _midnight(day: str) -> str:
    return dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), dt.UTC).isoformat()
