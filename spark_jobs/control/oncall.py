"""The on-call restart: stop the driver (at a batch boundary), optionally restore a checkpoint
backup or reset the checkpoint, and record the restart with its reason — the library entry point
of the `P_restart` DAG and the runbooks, so the event log has it once."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from spark_jobs.checkpoints import run_action
from spark_jobs.control import eventlog
from spark_jobs.control.stop import GRACEFUL_TIMEOUT_S, stop_driver
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome

MODES = ("restart", "restore_backup", "reset")


def restart(home: WeirHome, pipeline: str, *, actor: str, reason: str, mode: str = "restart",
            backup_id: str | None = None, reset_from: str | None = None, confirm: bool = False,
            graceful_timeout_s: float = GRACEFUL_TIMEOUT_S,
            checkpoint: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    """Leave `pipeline` stopped (with `intent=restart`) and ready for its next deploy.
    `checkpoint` runs the restore or reset with `run_action`'s arguments (default: `run_action`
    in this process; Airflow submits it as a `weir checkpoint` job)."""
    reason = (reason or "").strip()
    if not reason:
        raise UserError("an on-call restart needs a reason")
    if mode not in MODES:
        raise UserError(f"unknown restart mode {mode!r} (one of {', '.join(MODES)})")
    if mode != "restart" and not confirm:
        raise UserError(f"mode {mode} rewrites the checkpoint: set confirm=true to proceed")
    outcome = stop_driver(home, pipeline, actor=actor, reason=reason, intent="restart",
                          graceful_timeout_s=graceful_timeout_s)
    result: dict[str, Any] = {"stop": outcome.outcome, "driver_pid": outcome.driver_pid, "mode": mode}
    if mode != "restart":
        action = checkpoint or partial(run_action, home=home)
        result["checkpoint"] = action(
            pipeline, "restore" if mode == "restore_backup" else "reset", backup_id=backup_id,
            reset_from=reset_from, confirm=True, actor=actor, reason=reason)
    eventlog.record(pipeline, "restart", "requested", actor=actor, reason=reason, details=result, home=home)
    return result
