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
