"""The bodies of Weir's Python tasks (back-fill, DQ, checkpoints, maintenance). DAG files refer to
them by name; every heavy import happens here, at run time."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from spark_jobs.control.driver import REPO_ROOT
from spark_jobs.control.maintenance import SAFE_RETENTION_HOURS

log = logging.getLogger(__name__)
CLI_ENTRY = REPO_ROOT / "spark_jobs" / "cli.py"
RECENT_DAYS = 2


def submit_cli(pipeline: str, args: list[str], *, conn_id: str = "spark_default",
               actor: str | None = None) -> None:
    """Run a `weir` command as a Spark application (spark-submit of the CLI, blocking), so batch
    jobs run on the same cluster manager as the streams. `actor` names who asked, in the event log
    the command itself writes."""
    from spark_jobs.control.driver import driver_environment
    from weir_airflow.hooks import WeirSparkSubmitHook

    env = driver_environment()
    env_vars = {k: env[k] for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "WEIR_HOME", "PATH")}
    if actor:
        env_vars["WEIR_ACTOR"] = actor
    hook = WeirSparkSubmitHook(
        conn_id=conn_id, name=f"weir-{args[0]}-{pipeline}", application_args=args, env_vars=env_vars)
    hook.submit(str(CLI_ENTRY))


def backfill_date(pipeline: str, day: str, actor: str = "airflow") -> dict[str, Any]:
    """Back-fill one event date through the same job as `weir backfill` (which event-logs it)."""
    submit_cli(pipeline, ["backfill", pipeline, "--from", day, "--to", day], actor=actor)
    return {"pipeline": pipeline, "date": day}


def dq_check(pipeline: str, date_from: str | None, date_to: str | None) -> dict[str, Any]:
    """Run the pipeline's expectations over a range of event dates (DQ runs take turns, see
    `run_dq`); fail (and alert) when they do not hold. The DQ runner writes its own event-log
    entry."""
    from spark_jobs.quality import run_dq

    first = dt.date.fromisoformat(date_from) if date_from else None
    last = dt.date.fromisoformat(date_to) if date_to else None
    report = run_dq(pipeline, date_from=first, date_to=last)
    log.info("%s DQ %s..%s: %s; Data Docs: %s", pipeline, first, last,
             "passed" if report.success else f"FAILED {report.failed}", report.docs_path)
    if not report.success:
        raise RuntimeError(f"{pipeline}: expectations failed: {', '.join(report.failed)} "
                           f"(Data Docs: {report.docs_path})")
    return report.to_dict()


def recent_dates(logical_date: dt.datetime | None, days: int = RECENT_DAYS) -> tuple[str, str]:
    """The event dates a scheduled DQ run looks at: the last `days` days up to the run's date."""
    end = (logical_date or dt.datetime.now(dt.UTC)).date()
    return (end - dt.timedelta(days=days - 1)).isoformat(), end.isoformat()


def checkpoint_action(pipeline: str, action: str, *, backup_id: str | None = None,
                      reset_from: str | None = None, keep: int | None = None, dry_run: bool = False,
                      confirm: bool = False, actor: str = "airflow", reason: str | None = None) -> dict:
    """A checkpoint action (inspect, validate, backup, backups, restore, rewind, reset, prune,
    compat) from the checkpoint module; it writes its own event-log entries."""
    from spark_jobs.checkpoints import run_action

    result = run_action(pipeline, action, backup_id=backup_id or None, reset_from=reset_from or None,
                        keep=keep, dry_run=dry_run, confirm=confirm, actor=actor, reason=reason or None)
    log.info("%s checkpoint %s: %s", pipeline, action, result)
    return result


def maintain(pipeline: str, actor: str = "airflow") -> None:
    """OPTIMIZE and VACUUM (safe retention) of silver and gold through Spark; event-logged by
    `weir maintain` itself."""
    submit_cli(pipeline, ["maintain", pipeline, "--retain-hours", str(SAFE_RETENTION_HOURS),
                          "--actor", actor])


def plan_markdown(title: str, result: dict[str, Any]) -> str:
    """A dry-run result as the Markdown an approver reads: what changes, in the result's own words."""
    import json

    body = json.dumps(result.get("plan", result), indent=2, sort_keys=True, default=str)
    return f"### {title}: the plan (dry run, nothing changed yet)\n\n```json\n{body}\n```\n"


def checkpoint_plan(pipeline: str, action: str, *, backup_id: str | None = None,
                    reset_from: str | None = None, keep: int | None = None, actor: str = "airflow",
                    reason: str | None = None) -> dict[str, Any]:
    """The dry run of a destructive checkpoint action, for its approval step: the plan and its
    Markdown (`text`, shown to the approver)."""
    result = checkpoint_action(pipeline, action, backup_id=backup_id, reset_from=reset_from, keep=keep,
                               dry_run=True, actor=actor, reason=reason)
    return {"plan": result, "text": plan_markdown(f"checkpoint {action} of {pipeline}", result)}


def approved(payload: dict[str, Any] | None, what: str) -> dict[str, Any]:
    """The approval an action runs under; refuse to run without one (a skipped or failed approval
    never reaches here, this guards a DAG wired wrongly)."""
    from weir_airflow.approval import approval_of

    approval = approval_of(payload)
    if approval["decision"] != "Approve":
        raise RuntimeError(f"{what}: not approved ({approval}); nothing done")
    return approval


def approved_checkpoint_action(pipeline: str, action: str, payload: dict[str, Any] | None, *,
                               backup_id: str | None = None, reset_from: str | None = None,
                               keep: int | None = None, actor: str = "airflow",
                               reason: str | None = None) -> dict[str, Any]:
    """A destructive checkpoint action once approved: the approval stands for `--yes`, and who
    approved it and why go to the action's event."""
    from spark_jobs.checkpoints import run_action

    approval = approved(payload, f"{pipeline} checkpoint {action}")
    result = run_action(pipeline, action, backup_id=backup_id or None, reset_from=reset_from or None,
                        keep=keep, confirm=True, actor=actor, reason=reason or None, approval=approval)
    log.info("%s checkpoint %s approved by %s: %s", pipeline, action, approval["by"], result)
    return result


def refresh_plan(pipeline: str, origin: str, *, actor: str = "airflow",
                 reason: str | None = None) -> dict[str, Any]:
    """The dry run of `weir refresh`, for its approval step (plan and Markdown)."""
    from spark_jobs.checkpoints.refresh import refresh

    result = refresh(pipeline, origin=origin, dry_run=True, actor=actor, reason=reason or None)
    return {"plan": result, "text": plan_markdown(f"refresh of {pipeline} from {origin}", result)}


def approved_refresh(pipeline: str, origin: str, payload: dict[str, Any] | None, *,
                     actor: str = "airflow", reason: str | None = None) -> dict[str, Any]:
    """`weir refresh --yes` once approved (in this worker, as the checkpoint actions run)."""
    from spark_jobs.checkpoints.refresh import refresh

    approval = approved(payload, f"{pipeline} refresh")
    result = refresh(pipeline, origin=origin, confirm=True, actor=actor, reason=reason or None,
                     approval=approval)
    log.info("%s refresh from %s approved by %s: %s", pipeline, origin, approval["by"], result)
    return result
