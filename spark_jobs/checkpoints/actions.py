"""`run_action`: every checkpoint operation behind one function, called by `weir checkpoint`
and by the Airflow DAGs (`P_checkpoint`, `P_restart`), returning a JSON-able dict.

Guard rails for the destructive ones (restore, rewind, reset, prune): they need `confirm=True`
(`--yes`), `dry_run=True` only says what they would do, they write the event log, and every path
they touch is confined to WEIR_HOME. Restore, rewind and reset hold the pipeline's lease (the one
a driver takes) for their whole duration, so they refuse while P's driver is alive and no driver
(a supervisor's relaunch included) can start in the middle; they take an automatic backup of the
live checkpoint first, and restore and rewind re-run the deploy gate on the checkpoint they
installed. Prune never removes the newest backup that validates.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spark_jobs import catalog, topology
from spark_jobs.checkpoints import backups, generations, layout, validation
from spark_jobs.checkpoints.inspection import inspect
from spark_jobs.checkpoints.liveness import running_driver
from spark_jobs.checkpoints.validation import validate
from spark_jobs.control import deploy_gate, eventlog, lease
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.session import build_session
from spark_jobs.tables import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
ACTIONS = ("inspect", "validate", "backup", "backups", "restore", "rewind", "reset", "prune", "compat")
DESTRUCTIVE = frozenset({"restore", "rewind", "reset", "prune"})
NEEDS_STOPPED = frozenset({"restore", "rewind", "reset", "refresh"})    # refresh: see refresh.py
LEFTOVER_AGE_S = 3600.0


class ConfirmationRequiredError(UserError):
    """A destructive action without confirmation."""


class PipelineRunningError(UserError):
    """An action that needs the stream stopped, while its driver is alive."""


def run_action(pipeline: str, action: str, *, backup_id: str | None = None,
               reset_from: str | None = None, keep: int | None = None, dry_run: bool = False,
               confirm: bool = False, actor: str = "airflow", reason: str | None = None,
               approval: dict[str, Any] | None = None, home: WeirHome | None = None,
               spark: SparkSession | None = None,
               progress: backups.Progress | None = None) -> dict[str, Any]:
    """Run checkpoint `action` on `pipeline` and return what happened (JSON-able).

    `backup_id` names the backup for restore/rewind (`latest` = the newest); `reset_from` is
    earliest|latest|TIMESTAMP for reset; `keep` is the number of backups prune keeps; `approval`
    (who approved it in Airflow, and why) goes to the event log with the action. `home`,
    `spark` and `progress` are for in-process callers (tests, the CLI's progress bar)."""

    if action not in ACTIONS:
        raise UserError(f"unknown checkpoint action {action!r}; expected one of {', '.join(ACTIONS)}")
    home = home or WeirHome.from_env()
    p = catalog.load(pipeline)
    # Refuse up front, before any copy or event, when a path the action may touch escapes.
    for path in (home.checkpoints(p.name), home.backups(p.name),
                 *(topology.checkpoint_location(home, p, q) for q in topology.QUERIES)):
        home.confine(path)
    if action in DESTRUCTIVE:
        require_confirmation(f"{action} of {p.name} is destructive", confirm=confirm, dry_run=dry_run)
    started = time.monotonic()
    with holding(home, p.name, action, dry_run=dry_run):
        try:
            result = _ACTIONS[action](home, p, backup_id=backup_id, reset_from=reset_from, keep=keep,
                                      dry_run=dry_run, actor=actor, reason=reason, spark=spark,
                                      progress=progress)
        except Exception as err:
            if action in DESTRUCTIVE or action == "backup":
                _record(home, p.name, action, "failed", actor, reason,
                        _with(approval, {"error": str(err)[:500]}))
            raise
    result.setdefault("pipeline", p.name)
    result["action"] = action
    result["dry_run"] = dry_run
    result["seconds"] = round(time.monotonic() - started, 3)
    if approval:
        result["approval"] = approval
    if dry_run and action in NEEDS_STOPPED:
        result["running_driver"] = running_driver_note(home, p.name)
    if action in DESTRUCTIVE or action == "backup":
        _record(home, p.name, action, "dry run" if dry_run else "ok", actor, reason, result)
    return result


def require_confirmation(what: str, *, confirm: bool, dry_run: bool) -> None:
    """Refuse a destructive action that is neither confirmed nor a dry run; `what` says what it
    is and why it is destructive. The one guard of the checkpoint actions and the refresh."""
    if not (confirm or dry_run):
        raise ConfirmationRequiredError(
            f"{what}: confirm it (--yes on the CLI, the approval in Airflow) or preview it with "
            "--dry-run")


def _with(approval: dict[str, Any] | None, details: dict[str, Any]) -> dict[str, Any]:
    return {**details, "approval": approval} if approval else details


def _record(home: WeirHome, pipeline: str, action: str, outcome: str, actor: str,
            reason: str | None, details: dict[str, Any]) -> None:
    eventlog.record(pipeline, f"checkpoint {action}", outcome, actor=actor, reason=reason,
                    details=details, home=home)


@contextlib.contextmanager
def holding(home: WeirHome, pipeline: str, action: str, *, dry_run: bool) -> Iterator[None]:
    """Hold `pipeline` for a checkpoint-rewriting action: take its driver lease for the whole
    action, so a driver started meanwhile (a supervisor's relaunch) is refused with
    `LeaseHeldError` rather than starting on a half-installed checkpoint. A dry run holds and
    refuses nothing (its plan names the running driver, see `running_driver_note`: `P_restart`
    shows the plan before it stops the stream); other actions do not hold it."""

    if action not in NEEDS_STOPPED or dry_run:
        yield
        return
    try:
        held = lease.acquire(home, pipeline, holder=f"checkpoint {action}")
    except lease.LeaseHeldError:
        _refuse_while_running(home, pipeline, action)
        raise            # the holder ended between the two looks: still refused, by the lease
    with held:
        log.info("%s: held for checkpoint %s (lease pid %d)", pipeline, action, held.record.pid)
        yield


def running_driver_note(home: WeirHome, pipeline: str) -> str | None:
    """For a dry run's plan: the driver that runs now (the action itself refuses while it does,
    so it has to be stopped first), or None."""

    driver = running_driver(home, pipeline)
    return None if driver is None else f"{driver}: stop it first (P_restart does)"


def _refuse_while_running(home: WeirHome, pipeline: str, action: str) -> None:
    driver = running_driver(home, pipeline)
    if driver is not None:
        raise PipelineRunningError(
            f"refusing to {action} {pipeline} while it runs ({driver}); stop it first "
            f"(weir stop {pipeline} or the Airflow DAG {pipeline}_stop)")


def _gate_installed(home: WeirHome, p: Pipeline, actor: str,
                    spark: SparkSession | None) -> dict[str, Any]:
    """Re-run the deploy gate on the checkpoint just installed from a backup: the code admitted
    before fitted the old checkpoint, not necessarily this one. A misfit is reported here and,
    since its admission record stays cleared, refused by the gate at the next start."""

    deploy_gate.forget_admission(home, p.name)
    try:
        verdict = deploy_gate.admit(home, p, actor=actor, spark=spark)
    except deploy_gate.IncompatibleCodeError as err:
        log.warning("%s: the restored checkpoint does not fit the current code: %s", p.name, err)
        return {"compatible": False, "refused": str(err)}
    except Exception as err:  # the checkpoint is installed; the gate runs again at the next start
        log.warning("%s: deploy gate not run on the restored checkpoint: %s", p.name, err)
        return {"compatible": None, "unchecked": str(err).splitlines()[0][:500]}
    return {"compatible": True, "verdict": verdict["verdict"]}


def _session(spark: SparkSession | None, name: str) -> SparkSession:
    return spark or build_session(f"weir-checkpoint-{name}")


# --- the actions ---------------------------------------------------------------------------------

def _inspect(home: WeirHome, p: Pipeline, *, spark: SparkSession | None, **_: Any) -> dict[str, Any]:
    return inspect(home, p, _session(spark, p.name))


def _validate(home: WeirHome, p: Pipeline, **_: Any) -> dict[str, Any]:
    return validate(home, p)


def _backup(home: WeirHome, p: Pipeline, *, actor: str, reason: str | None, dry_run: bool,
            progress: backups.Progress | None, **_: Any) -> dict[str, Any]:
    if dry_run:
        return {"would_copy": {q: layout.last_committed(folder)
                               for q, folder in topology.existing_checkpoints(home, p).items()}}
    if not topology.existing_checkpoints(home, p):
        # Not an error: the hourly backup DAG runs before a new pipeline's first start too.
        return {"id": None, "skipped": f"{p.name} has no checkpoint yet: nothing to back up"}
    generation = int(generations.current_generation(home, p.name).get("generation", 0))
    periodic = actor == "airflow" and any(w in (reason or "") for w in ("periodic", "scheduled"))
    kind = "scheduled" if periodic else "manual"
    manifest = backups.take_backup(home, p, kind=kind, actor=actor, reason=reason,
                                   generation=generation, progress=progress)
    return {"id": manifest.id, "backup": manifest.as_dict()}


def _backups(home: WeirHome, p: Pipeline, **_: Any) -> dict[str, Any]:
    return {"backups": [m.as_dict() for m in backups.list_backups(home, p.name)]}


def _restore(home: WeirHome, p: Pipeline, *, backup_id: str | None, actor: str, reason: str | None,
             dry_run: bool, spark: SparkSession | None, progress: backups.Progress | None,
             **_: Any) -> dict[str, Any]:
    if not backup_id:
        raise UserError("restore needs a backup id (see `weir checkpoint backups`)")
    manifest, path = _find(home, p, backup_id)
    plan = {"backup": manifest.id, "batches": {q: c.batch for q, c in manifest.queries.items()}}
    if dry_run:
        return {"plan": plan}
    safety = generations.safety_backup(home, p, "restore", actor, reason, progress)
    staged = generations.staging_folder(home, p.name)
    generations.stage_backup(path, staged)
    number = generations.install(home, p, staged, f"restore {manifest.id}")
    return {"plan": plan, "safety_backup": safety.id if safety else None, "generation": number,
            "deploy_gate": _gate_installed(home, p, actor, spark)}


def _rewind(home: WeirHome, p: Pipeline, *, backup_id: str | None, actor: str, reason: str | None,
            dry_run: bool, spark: SparkSession | None, progress: backups.Progress | None,
            **_: Any) -> dict[str, Any]:
    """Tables (`PipelineTables.outputs`) back to the backup's versions, the ingest checkpoint back
    to the backup's batch; the downstream queries (gold, sessions) start fresh, their tables rebuilt
    from silver's restored snapshot, because silver's history after the RESTORE still holds the bad
    commits a Delta stream would read again."""

    if not backup_id:
        raise UserError("rewind needs --to BACKUP_ID (see `weir checkpoint backups`)")
    manifest, path = _find(home, p, backup_id)
    tables = PipelineTables.of(home, p).outputs()     # the dimension is an input: never rewound
    current = backups.table_versions(home, p)
    restores = {layer: manifest.table_versions[layer] for layer in tables
                if manifest.table_versions.get(layer) is not None
                and manifest.table_versions[layer] != current.get(layer)}
    ingest = manifest.queries.get("ingest")
    plan = {"backup": manifest.id, "ingest_batch": ingest.batch if ingest else None,
            "restore_tables": {layer: {"from": current.get(layer), "to": v} for layer, v in restores.items()},
            "fresh_queries": [q for q in topology.QUERIES if q != "ingest"]}
    if dry_run:
        return {"plan": plan}
    safety = generations.safety_backup(home, p, "rewind", actor, reason, progress)
    session = _session(spark, p.name) if restores else None
    for layer, version in restores.items():
        from delta.tables import DeltaTable


        target = home.confine(tables[layer])
        retry_conflicts(lambda t=target, v=version: DeltaTable.forPath(session, str(t)).restoreToVersion(v),
                        what=f"restore {target} to version {version}")
        log.info("%s rewind: %s restored to version %d", p.name, layer, version)
    staged = generations.staging_folder(home, p.name)
    generations.stage_backup(path, staged)
    for query in plan["fresh_queries"]:
        shutil.rmtree(staged / query, ignore_errors=True)
    number = generations.install(home, p, staged, f"rewind to {manifest.id}")
    return {"plan": plan, "safety_backup": safety.id if safety else None, "generation": number,
            "table_versions": backups.table_versions(home, p),
            "deploy_gate": _gate_installed(home, p, actor, session or spark)}


def _reset(home: WeirHome, p: Pipeline, *, reset_from: str | None, actor: str, reason: str | None,
           dry_run: bool, progress: backups.Progress | None, **_: Any) -> dict[str, Any]:
    if not reset_from:
        raise UserError("reset needs --from earliest|latest|TIMESTAMP")
    try:
        plan = generations.plan_reset(home, p, reset_from)
    except generations.ResetFromError as err:
        raise UserError(str(err)) from None
    if dry_run:
        return {"plan": plan.as_dict(), "files_to_process": list(plan.pending_files)[:50]}
    safety = generations.safety_backup(home, p, "reset", actor, reason, progress)
    staged = generations.staging_folder(home, p.name)
    generations.stage_reset(home, p, plan, staged)
    number = generations.install(home, p, staged, f"reset --from {reset_from}")
    generations.after_install(home, p, plan)

    # The new generation's state is built by the next start: let the gate check that start.
    deploy_gate.forget_admission(home, p.name)
    return {"plan": plan.as_dict(), "old_generation_backup": safety.id if safety else None,
            "generation": number}


def _prune(home: WeirHome, p: Pipeline, *, keep: int | None, dry_run: bool, **_: Any) -> dict[str, Any]:
    """Keep the newest `keep` backups (old generations are backups too) and clear what crashed
    operations left behind (partial backups, staging folders) once they are an hour old."""
    if keep is None or keep < 1:
        raise UserError("prune needs --keep N with N >= 1 (the newest N backups are kept)")
    known = backups.list_backups(home, p.name)
    doomed = [m.id for m in known[:-keep]] if len(known) > keep else []
    protected = _newest_valid(home, p.name, known)
    if protected is not None and protected in doomed:
        # The newest backups are all damaged: the last one a restore can use stays.
        log.warning("%s prune: keeping %s, the newest backup that validates", p.name, protected)
        doomed.remove(protected)
    leftovers = [entry for folder in (home.backups(p.name), home.checkpoints(p.name)) if folder.is_dir()
                 for entry in folder.iterdir()
                 if entry.name.startswith((".staging-", ".replaced-")) or entry.name.endswith(".partial")
                 if time.time() - entry.stat().st_mtime > LEFTOVER_AGE_S]
    if not dry_run:
        for backup_id in doomed:
            backups.remove_backup(home, p.name, backup_id)
        for entry in leftovers:
            shutil.rmtree(home.confine(entry), ignore_errors=True)
    return {"removed": doomed, "kept": [m.id for m in known if m.id not in doomed],
            "newest_valid": protected, "leftovers_removed": [str(e) for e in leftovers]}


def _newest_valid(home: WeirHome, pipeline: str, known: list[backups.Manifest]) -> str | None:
    """The id of the newest backup whose checkpoint validates (no error), or None."""
    for manifest in reversed(known):
        folder = home.confine(home.backups(pipeline) / manifest.id)
        problems = validation.validate_backup(folder, manifest, home.root)
        if not problems:
            return manifest.id
        log.warning("%s prune: backup %s does not validate: %s", pipeline, manifest.id,
                    "; ".join(f"{pr.file}: {pr.problem}" for pr in problems[:3]))
    return None


def _compat(home: WeirHome, p: Pipeline, *, spark: SparkSession | None, **_: Any) -> dict[str, Any]:
    from spark_jobs.checkpoints.compat import compat

    return compat(_session(spark, p.name), home, p)


def _find(home: WeirHome, p: Pipeline, backup_id: str) -> tuple[backups.Manifest, Any]:
    try:
        manifest, path = backups.find_backup(home, p.name, backup_id)
    except backups.BackupNotFoundError as err:
        raise UserError(str(err)) from None
    if manifest.pipeline != p.name:
        raise UserError(f"refusing backup {manifest.id}: it is a backup of pipeline {manifest.pipeline}, "
                        f"not of {p.name} (its folder was copied or moved into {p.name}'s backups)")
    return manifest, path


_ACTIONS = {
    "inspect": _inspect, "validate": _validate, "backup": _backup, "backups": _backups,
    "restore": _restore, "rewind": _rewind, "reset": _reset, "prune": _prune, "compat": _compat,
}
