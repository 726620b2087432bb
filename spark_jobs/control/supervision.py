"""What the supervisor remembers between deferrals, and the restart policy it applies.

The `supervisor` document of the control store (`spark_jobs.control.store`; the file
`control/<P>/supervisor.json` by default) holds the supervisor's state (running, restarting,
failed, stopped) and the last reason — the restarts themselves are in the event log
(`supervisor.automatic_restarts`); the `stopped` document marks a pipeline as intentionally
stopped, so nothing restarts it until it is deployed again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_jobs.catalog import RestartPolicy
from spark_jobs.control.lease import iso, now_utc, parse_iso
from spark_jobs.control.store import STOPPED, SUPERVISOR, FileStore, control_store
from spark_jobs.home import WeirHome


# Where the file store keeps them (the embedded default).
def supervisor_path(home: WeirHome, pipeline: str) -> Path:
    return FileStore(home).path(pipeline, SUPERVISOR)


def stopped_path(home: WeirHome, pipeline: str) -> Path:
    return FileStore(home).path(pipeline, STOPPED)


@dataclass
class SupervisorState:
    pipeline: str
    state: str = "deploying"
    last_reason: str | None = None
    updated_at: str | None = None

    @classmethod
    def load(cls, home: WeirHome, pipeline: str) -> SupervisorState:
        data = control_store(home).get(pipeline, SUPERVISOR) or {}
        return cls(pipeline, data.get("state", "none"), data.get("last_reason"), data.get("updated_at"))

    def save(self, home: WeirHome) -> None:
        self.updated_at = iso(now_utc())
        control_store(home).put(self.pipeline, SUPERVISOR, {
            "pipeline": self.pipeline, "state": self.state, "last_reason": self.last_reason,
            "updated_at": self.updated_at})


def recent_restarts(restarts: list[str], policy: RestartPolicy, now: dt.datetime) -> list[dt.datetime]:
    window = dt.timedelta(seconds=policy.window_s)
    return [t for t in (parse_iso(s) for s in restarts) if now - t < window]


def next_backoff_s(restarts: list[str], policy: RestartPolicy,
                   now: dt.datetime | None = None) -> float | None:
    """Seconds to wait before the next restart (exponential in the restarts of the current
    window), or None when the window's restart budget is spent."""
    recent = recent_restarts(restarts, policy, now or now_utc())
    if len(recent) >= policy.max_restarts:
        return None
    return min(policy.max_backoff_s, policy.initial_backoff_s * 2 ** len(recent))


def mark_stopped(home: WeirHome, pipeline: str, *, actor: str, reason: str | None,
                 intent: str = "stop") -> None:
    control_store(home).put(pipeline, STOPPED, {
        "pipeline": pipeline, "actor": actor, "reason": reason, "intent": intent,
        "at": iso(now_utc())})


def stopped_marker(home: WeirHome, pipeline: str) -> dict[str, Any] | None:
    return control_store(home).get(pipeline, STOPPED)


def clear_stopped(home: WeirHome, pipeline: str) -> None:
    control_store(home).delete(pipeline, STOPPED)
