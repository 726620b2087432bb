"""The bodies of Weir's Python tasks (back-fill, DQ, checkpoints, maintenance). DAG files refer to
them by name. Every Spark action is a spark-submitted `weir` command, so no JVM starts in the
Airflow worker; a command's JSON result comes back through a private file under WEIR_HOME."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_jobs.commands.checkpoint import command_line
from spark_jobs.commands.refresh import command_line as refresh_command_line
from spark_jobs.control.driver import driver_environment, entry_point
from spark_jobs.control.maintenance import SAFE_RETENTION_HOURS
from spark_jobs.control.submit_secrets import private_folder
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from weir_airflow.approval import approval_of
from weir_airflow.hooks import WeirSparkSubmitHook

if TYPE_CHECKING:
    from spark_jobs.catalog import Pipeline
    from spark_jobs.control.deploy_gate import CompatCheck

log = logging.getLogger(__name__)
RECENT_DAYS = 2
# `weir dq` with a failed expectation, `weir checkpoint validate|compat` on an unhealthy or
# incompatible checkpoint: a verdict that comes with a result, not an error.
EXIT_VERDICT = 1
# The CLI's one-line reason (`weir dq: ...`) or argparse's (`weir checkpoint reset: error: ...`).
CLI_MESSAGE = re.compile(r"^weir( [\w-]+)*: ")


class CommandFailedError(UserError):
    """A submitted `weir` command failed; the message is the command's own one-line reason."""


@dataclass(frozen=True)
class CommandOutcome:
    """How a submitted `weir` command ended: its exit code and the result it wrote, if any."""

    returncode: int
    result: dict[str, Any] | None


def submit_cli(pipeline: str, args: list[str], *, conn_id: str = "spark_default",
               actor: str | None = None, with_result: bool = False) -> CommandOutcome:
    """Run a `weir` command as a Spark application (spark-submit of the CLI, blocking), so every
    Spark job runs on the cluster manager of the streams and none in the Airflow worker. With
    `with_result`, the command writes its JSON result to a file this reads back (and removes).
    A failure raises `CommandFailedError` with the CLI's one-line reason, except an exit
    `EXIT_VERDICT` that came with a result. `actor` names who asked, in the command's event log."""

    env = driver_environment()
    env_vars = {k: env[k] for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "WEIR_HOME", "PATH")}
    if actor:
        env_vars["WEIR_ACTOR"] = actor
    result_file = None
    if with_result:
        folder = private_folder(WeirHome.from_env().results(pipeline))
        result_file = folder / f"{args[0]}-{uuid.uuid4().hex}.json"
        args = [*args, "--result-file", str(result_file)]
    hook = WeirSparkSubmitHook(
        conn_id=conn_id, name=f"weir-{args[0]}-{pipeline}", application_args=args, env_vars=env_vars)
    result = None
    try:
        submitted = hook.run(entry_point("spark_jobs.cli"))
        if result_file is not None and result_file.is_file():
            result = json.loads(result_file.read_text(encoding="utf-8"))
    finally:
        if result_file is not None:
            result_file.unlink(missing_ok=True)
    if submitted.returncode == 0 or (submitted.returncode == EXIT_VERDICT and result is not None):
        return CommandOutcome(submitted.returncode, result)
    reason = next((line for line in reversed(submitted.output) if CLI_MESSAGE.match(line)),
                  f"weir {args[0]} exited with code {submitted.returncode} (see the log above)")
    raise CommandFailedError(reason)


def backfill_date(pipeline: str, day: str, actor: str = "airflow") -> dict[str, Any]:
    """Back-fill one event date through the same job as `weir backfill` (which event-logs it)."""
    submit_cli(pipeline, ["backfill", pipeline, "--from", day, "--to", day], actor=actor)
    return {"pipeline": pipeline, "date": day}


def dq_check(pipeline: str, date_from: str | None, date_to: str | None) -> dict[str, Any]:
    """Run the pipeline's expectations over a range of event dates through `weir dq` (DQ runs
    take turns, see `run_dq`); fail (and alert) when they do not hold. The DQ runner writes its
    own event-log entry."""
    args = ["dq", pipeline]
    if date_from:
        args.append(f"--from={date_from}")
    if date_to:
        args.append(f"--to={date_to}")
    report = submit_cli(pipeline, args, with_result=True).result
    if report is None:
        raise CommandFailedError(f"weir dq {pipeline} wrote no report")
    log.info("%s DQ %s..%s: %s; Data Docs: %s", pipeline, report["date_from"], report["date_to"],
             "passed" if report["success"] else f"FAILED {report['failed']}", report["docs_path"])
    if not report["success"]:
        raise RuntimeError(f"{pipeline}: expectations failed: {', '.join(report['failed'])} "
                           f"(Data Docs: {report['docs_path']})")
    return report


def recent_dates(logical_date: dt.datetime | None, days: int = RECENT_DAYS) -> tuple[str, str]:
    """The event dates a scheduled DQ run looks at: the last `days` days up to the run's date."""
    end = (logical_date or dt.datetime.now(dt.UTC)).date()
    return (end - dt.timedelta(days=days - 1)).isoformat(), end.isoformat()


def checkpoint_action(pipeline: str, action: str, *, backup_id: str | None = None,
                      reset_from: str | None = None, keep: int | None = None, dry_run: bool = False,
                      confirm: bool = False, actor: str = "airflow", reason: str | None = None,
                      approval: dict[str, Any] | None = None, conn_id: str = "spark_default") -> dict:
    """A checkpoint action (inspect, validate, backup, backups, restore, rewind, reset, prune,
    compat) through `weir checkpoint`, which writes its own event-log entries (with `approval`,
    who approved it and why, for a destructive one). An unhealthy (validate) or incompatible
    (compat) verdict is returned, not raised, as the CLI's exit 1."""
    args = command_line(pipeline, action, backup_id=backup_id or None, reset_from=reset_from or None,
                        keep=keep, dry_run=dry_run, confirm=confirm, reason=reason or None,
                        approval=approval)
    result = submit_cli(pipeline, args, conn_id=conn_id, actor=actor, with_result=True).result
    if result is None:
        raise CommandFailedError(f"weir checkpoint {action} {pipeline} wrote no result")
    log.info("%s checkpoint %s: %s", pipeline, action, result)
    return result


def submitted_compat_check(*, conn_id: str = "spark_default") -> CompatCheck:
    """The deploy gate's compatibility check as a submitted `weir checkpoint compat`."""
    def check(pipeline: Pipeline) -> dict[str, Any]:
        return checkpoint_action(pipeline.name, "compat", conn_id=conn_id)

    return check


def maintain(pipeline: str, actor: str = "airflow") -> None:
    """Compaction and VACUUM (safe retention) of every table the pipeline writes, through Spark;
    event-logged by `weir maintain` itself."""
    submit_cli(pipeline, ["maintain", pipeline, "--retain-hours", str(SAFE_RETENTION_HOURS),
                          "--actor", actor])


def plan_markdown(title: str, result: dict[str, Any]) -> str:
    """A dry-run result as the Markdown an approver reads: what changes, in the result's own words."""

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

    approval = approval_of(payload)
    if approval["decision"] != "Approve":
        raise RuntimeError(f"{what}: not approved ({approval}); nothing done")
    return approval


def approved_checkpoint_action(pipeline: str, action: str, payload: dict[str, Any] | None, *,
                               backup_id: str | None = None, reset_from: str | None = None,
                               keep: int | None = None, actor: str = "airflow",
                               reason: str | None = None) -> dict[str, Any]:
    """A destructive checkpoint action once approved, submitted as `weir checkpoint ... --yes
    --approved-by NAME --approval-reason TEXT`: the approval stands for `--yes`, and who approved
    it and why go to the action's event."""
    approval = approved(payload, f"{pipeline} checkpoint {action}")
    result = checkpoint_action(pipeline, action, backup_id=backup_id, reset_from=reset_from, keep=keep,
                               confirm=True, actor=actor, reason=reason, approval=approval)
    log.info("%s checkpoint %s approved by %s: %s", pipeline, action, approval["by"], result)
    return result


def submitted_refresh(pipeline: str, origin: str, *, dry_run: bool = False, actor: str = "airflow",
                      reason: str | None = None, approval: dict[str, Any] | None = None,
                      conn_id: str = "spark_default") -> dict[str, Any]:
    """`weir refresh` as a submitted Spark job (its plan from the source reads bronze, the refresh
    rebuilds the tables): `--dry-run`, or `--yes` with the approval; event-logged by the command."""
    args = refresh_command_line(pipeline, origin, dry_run=dry_run, reason=reason, approval=approval)
    result = submit_cli(pipeline, args, conn_id=conn_id, actor=actor, with_result=True).result
    if result is None:
        raise CommandFailedError(f"weir refresh {pipeline} wrote no result")
    return result


def refresh_plan(pipeline: str, origin: str, *, actor: str = "airflow",
                 reason: str | None = None) -> dict[str, Any]:
    """The dry run of `weir refresh`, for its approval step (plan and Markdown)."""
    result = submitted_refresh(pipeline, origin, dry_run=True, actor=actor, reason=reason or None)
    return {"plan": result, "text": plan_markdown(f"refresh of {pipeline} from {origin}", result)}


def approved_refresh(pipeline: str, origin: str, payload: dict[str, Any] | None, *,
                     actor: str = "airflow", reason: str | None = None) -> dict[str, Any]:
    """`weir refresh --yes --approved-by NAME ...` once approved, submitted like every action."""
    approval = approved(payload, f"{pipeline} refresh")
    result = submitted_refresh(pipeline, origin, actor=actor, reason=reason or None, approval=approval)
    log.info("%s refresh from %s approved by %s: %s", pipeline, origin, approval["by"], result)
    return result
