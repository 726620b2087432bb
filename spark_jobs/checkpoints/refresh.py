"""`refresh`: a pipeline's full refresh as one action (`weir refresh`, the `P_refresh` DAG), in
place of the hand-typed runbook it replaces.

Like the destructive checkpoint actions it refuses while P's driver runs (stop it first, as the
runbook did), holds P's lease for the whole action, takes a whole backup of the live checkpoint
first (its manifest records the tables' versions, so `weir checkpoint rewind --to` it undoes the
refresh: the tables are overwritten in place, their old versions stay in their history), installs
a new checkpoint generation and rebuilds the tables:

- from bronze: the ingest query keeps its position (bronze is whole up to it); silver and
  quarantine are re-derived from all of bronze, gold from silver, and the gold query starts fresh;
- from source: bronze too. Every query starts from the source's start, and bronze is re-read
  from it, only when the source still holds every line bronze has (refused otherwise).

It writes one event (`refresh`) with the actor, the reason and, from Airflow, the approval.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from spark_jobs import catalog, topology
from spark_jobs.catalog import FileSource
from spark_jobs.checkpoints import backups, generations, layout
from spark_jobs.checkpoints.actions import holding, require_confirmation, running_driver_note
from spark_jobs.control import deploy_gate, eventlog
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.landing_manifest import DIGEST_HEX_IN_SOURCE, file_digest
from spark_jobs.layers import PipelineTables, ensure_tables
from spark_jobs.session import build_session
from spark_jobs.tables import delta_version, retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
ORIGINS = ("bronze", "source")
ACTION = "refresh"
SHOWN_MISSING = 10


class SourceNoLongerHoldsError(UserError):
    """A refresh from the source, while the source no longer holds lines that bronze has."""


@dataclass(frozen=True)
class RefreshPlan:
    """What a refresh changes: per query its checkpoint files, per table its version, and the
    backup it takes first."""

    pipeline: str
    origin: str
    checkpoint: dict[str, dict[str, Any]]
    tables: dict[str, dict[str, Any]]
    backup: dict[str, Any] | None
    generation: dict[str, int]
    source: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "checkpoint": self.checkpoint, "tables": self.tables,
                "backup": self.backup, "generation": self.generation, "source": self.source}


def refresh(pipeline: str, *, origin: str = "bronze", dry_run: bool = False, confirm: bool = False,
            actor: str = "airflow", reason: str | None = None, approval: dict[str, Any] | None = None,
            home: WeirHome | None = None, spark: SparkSession | None = None,
            progress: backups.Progress | None = None) -> dict[str, Any]:
    """Fully refresh `pipeline` from `origin` (bronze|source) and return what was done, or with
    `dry_run` the plan alone (nothing changes). `approval` (who approved, why) is logged with it."""

    if origin not in ORIGINS:
        raise UserError(f"unknown refresh origin {origin!r}; expected one of {', '.join(ORIGINS)}")
    home = home or WeirHome.from_env()
    p = catalog.load(pipeline)
    _confine(home, p)
    require_confirmation(f"refresh of {p.name} rewrites its checkpoint and tables", confirm=confirm,
                         dry_run=dry_run)
    started = time.monotonic()
    with holding(home, p.name, ACTION, dry_run=dry_run):
        try:
            # Spark only when bronze is read: a dry run from bronze plans from files alone.
            session = _session(spark, p.name) if origin == "source" or not dry_run else None
            plan = plan_refresh(home, p, origin, session)
            result: dict[str, Any] = {"plan": plan.as_dict()}
            if session is not None and not dry_run:
                result.update(_refresh(session, home, p, plan, actor, reason, progress))
        except Exception as err:
            if not dry_run:
                _record(home, p.name, "failed", actor, reason, approval, {"origin": origin,
                                                                          "error": str(err)[:500]})
            raise
    result.update(pipeline=p.name, action=ACTION, dry_run=dry_run,
                  seconds=round(time.monotonic() - started, 3))
    if dry_run:
        result["running_driver"] = running_driver_note(home, p.name)
    if approval:
        result["approval"] = approval
    _record(home, p.name, "dry run" if dry_run else "ok", actor, reason, approval, result)
    return result


def plan_refresh(home: WeirHome, p: Pipeline, origin: str,
                 spark: SparkSession | None = None) -> RefreshPlan:
    """The plan of a refresh (reads only); from the source (which needs `spark`, to read
    bronze), refused when the source no longer holds what bronze has."""

    live = topology.existing_checkpoints(home, p)
    checkpoint = {}
    for query in topology.QUERIES:
        folder = live.get(query)
        files = sorted(str(f.relative_to(home.root)) for f in (folder.rglob("*") if folder else ())
                       if f.is_file())
        keep = origin == "bronze" and query == "ingest"
        checkpoint[query] = {
            "files": len(files), "last_committed_batch": layout.last_committed(folder) if folder else None,
            "after": ("kept: continues from its position" if keep else
                      "removed: starts from the source's start" if query == "ingest" else
                      "removed: starts fresh after its table is rebuilt from silver"),
            "removed_files": [] if keep else files[:50]}
    versions = backups.table_versions(home, p)
    outputs = PipelineTables.of(home, p).outputs()
    rebuilt = [layer for layer in outputs if layer != "bronze" or origin == "source"]
    tables = {layer: {"version": versions.get(layer),
                      "after": "overwritten by the rebuild (a new version; this one stays in the "
                               "table's history)" if layer in rebuilt else "unchanged"}
              for layer in outputs}
    backup = ({"kind": f"before {ACTION}", "whole copy of": {q: checkpoint[q]["files"] for q in live},
               "undo": f"weir checkpoint rewind {p.name} --to <this backup> --yes"} if live else None)
    current = int(generations.current_generation(home, p.name).get("generation", 0))
    source = {"read": "bronze only"}
    if origin == "source":
        source = _check_source(spark or _session(None, p.name), home, p)
    return RefreshPlan(p.name, origin, checkpoint, tables, backup,
                       {"from": current, "to": current + 1}, source)


def _refresh(spark: SparkSession, home: WeirHome, p: Pipeline, plan: RefreshPlan, actor: str,
             reason: str | None, progress: backups.Progress | None) -> dict[str, Any]:
    from spark_jobs import backfill

    safety = generations.safety_backup(home, p, ACTION, actor, reason, progress)
    staged = generations.staging_folder(home, p.name)
    reset = generations.plan_reset(home, p, "earliest")
    if plan.origin == "bronze" and safety is not None:
        generations.stage_backup(home.confine(home.backups(p.name) / safety.id), staged)
        for query in topology.QUERIES:
            if query != "ingest":
                shutil.rmtree(staged / query, ignore_errors=True)
    number = generations.install(home, p, staged, f"{ACTION} from {plan.origin}")
    if plan.origin == "source":
        generations.after_install(home, p, reset)       # Kafka: the fresh checkpoint reads from earliest
        _empty_bronze(spark, home, p)
    # The new generation's queries are built by the next start: let the deploy gate check it.
    deploy_gate.forget_admission(home, p.name)
    bronze_version = backfill.rebuild_from_bronze(spark, p, home)
    if plan.origin == "source":
        _ingest_from_source(spark, home, p)

    rebuilt = backfill.rebuild_from_silver(spark, p, home, ensure_tables(spark, home, p))
    log.info("%s refreshed from %s: generation %d, bronze version %d, rebuilt from silver: %s",
             p.name, plan.origin, number, bronze_version, rebuilt)
    return {"safety_backup": safety.id if safety else None, "generation": number,
            "table_versions": backups.table_versions(home, p)}


def _empty_bronze(spark: SparkSession, home: WeirHome, p: Pipeline) -> None:
    """Bronze emptied in one overwrite (with the current schema), to be re-read from the source."""
    from spark_jobs import transforms

    tables = ensure_tables(spark, home, p)
    empty = spark.createDataFrame([], transforms.BRONZE_TABLE_SCHEMA)
    retry_conflicts(lambda: empty.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                    .partitionBy("ingest_date").save(str(tables.bronze)), what=f"empty {tables.bronze}")


def _ingest_from_source(spark: SparkSession, home: WeirHome, p: Pipeline) -> None:
    """Run the ingest query over everything the source holds (availableNow), under the lease this
    action holds: the driver's own batches, fenced by that lease (`lease.fence`)."""
    from spark_jobs import stream

    tables = ensure_tables(spark, home, p)
    shuffle = "spark.sql.shuffle.partitions"
    before = spark.conf.get(shuffle)
    spark.conf.set(shuffle, str(p.shuffle_partitions))
    try:
        query = stream.start_query(spark, p, home, tables, "ingest", once=True)
        query.awaitTermination()
        if query.exception() is not None:
            raise stream.StreamFailedError(f"{query.name} failed: {query.exception()}")
    finally:
        spark.conf.set(shuffle, before)


def _check_source(spark: SparkSession, home: WeirHome, p: Pipeline) -> dict[str, Any]:
    """Whether the source still holds every line bronze has: for landing files, each file bronze
    read is still there with the same content. Raises `SourceNoLongerHoldsError` when not."""
    from pyspark.sql import functions as F


    if not isinstance(p.source, FileSource):
        raise SourceNoLongerHoldsError(
            f"refresh --from-source of {p.name}: a {p.source.kind} source cannot be checked to still "
            "hold everything bronze has (retention); refresh --from-bronze instead")
    bronze = PipelineTables.of(home, p).bronze
    if delta_version(bronze) is None:
        sources: list[str] = []
    else:
        rows = spark.read.format("delta").load(str(bronze)).select("source").distinct()
        sources = sorted(r[0] for r in rows.where(F.col("source").isNotNull()).collect())
    missing = []
    for source in sources:
        location, _, digest = source.partition("#")
        path = Path(unquote(urlparse(location).path))
        if not path.is_file() or file_digest(str(path))[:DIGEST_HEX_IN_SOURCE] != digest:
            missing.append(str(path))
    if missing:
        raise SourceNoLongerHoldsError(
            f"refresh --from-source of {p.name} would lose data: {len(missing)} landing file(s) that "
            f"bronze read are gone or changed (e.g. {', '.join(missing[:3])}); refresh --from-bronze "
            "instead")
    landing = generations.landing_files(home, p)
    return {"kind": "files", "landing_files": len(landing), "bronze_files_still_held": len(sources)}


def _confine(home: WeirHome, p: Pipeline) -> None:
    """Refuse up front, before any copy or event, when a path the refresh touches escapes."""

    for path in (home.checkpoints(p.name), home.backups(p.name),
                 *(topology.checkpoint_location(home, p, q) for q in topology.QUERIES),
                 *PipelineTables.of(home, p).named().values()):
        home.confine(path)


def _session(spark: SparkSession | None, name: str) -> SparkSession:
    return spark or build_session(f"weir-refresh-{name}")


def _record(home: WeirHome, pipeline: str, outcome: str, actor: str, reason: str | None,
            approval: dict[str, Any] | None, details: dict[str, Any]) -> None:
    eventlog.record(pipeline, ACTION, outcome, actor=actor, reason=reason,
                    details={**details, "approval": approval} if approval else details, home=home)
