"""The numbers of the cockpit: an overview row per pipeline (the state `weir status` computes,
plus rates, lag, watermark, quarantine share and the latest DQ verdict) and a pipeline's page
(the last hour of progress, recent batches, event log, DQ results, checkpoint state). Reads only
files and Delta tables through delta-rs: no JVM in the Airflow API server."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from spark_jobs import catalog
from spark_jobs.checkpoints import backups, layout
from spark_jobs.checkpoints.generations import current_generation
from spark_jobs.cockpit import actions
from spark_jobs.cockpit.row_counts import row_count
from spark_jobs.control import eventlog, progress
from spark_jobs.control.lease import iso
from spark_jobs.control.status import pipeline_status
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.quality import results
from spark_jobs.topology import checkpoint_location, queries_of, query_name

log = logging.getLogger(__name__)
WINDOW = dt.timedelta(hours=1)
RECENT_BATCHES = 20
EVENT_TAIL = 20
SERIES = ("input_rows_per_second", "processed_rows_per_second", "batch_duration_ms", "kafka_lag")


def _plain(value: Any) -> Any:
    """A table value as JSON shows it: times in ISO-8601 UTC, dates as text."""
    if isinstance(value, dt.datetime):
        return iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _plain_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in row.items()}


def _latest_dq(home: WeirHome, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The verdict of the newest DQ run of `name` and its per-expectation rows."""
    rows = results.read(home, name)
    if not rows:
        return None, []
    newest = rows[-1]["run_id"]
    run = [r for r in rows if r["run_id"] == newest]
    verdict = {"run_id": newest, "run_time": iso(run[0]["run_time"]), "success": run[0]["run_success"],
               "expectations": len(run), "failed": sum(1 for r in run if not r["success"]),
               "date_from": run[0]["date_from"].isoformat(), "date_to": run[0]["date_to"].isoformat()}
    return verdict, [_plain_row(r) for r in run]


def _quarantine_share(home: WeirHome, name: str) -> dict[str, Any]:
    tables = PipelineTables.of(home, catalog.load(name))
    bronze, quarantine = row_count(tables.bronze), row_count(tables.quarantine) or 0
    share = quarantine / bronze if bronze else None
    return {"bronze_rows": bronze, "quarantine_rows": quarantine, "share": share}


def overview(home: WeirHome, name: str, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """One pipeline's row of the overview: `weir status`'s answer plus, per query, the newest
    progress (rates, lag, watermark), the quarantine share and the latest DQ verdict."""
    now = now or dt.datetime.now(dt.UTC)
    pipeline = catalog.load(name)
    status = pipeline_status(home, name)
    names = {query_name(pipeline, q): q for q in queries_of(pipeline)}
    latest = progress.latest_by_query(home, name, expected=tuple(names), now=now)
    queries = {}
    for qname, row in sorted(latest.items()):
        queries[names.get(qname, qname)] = {
            "query": qname, "batch_id": row["batch_id"],
            "progress_at": _plain(row["progress_at"]), "recorded_at": _plain(row["recorded_at"]),
            "input_rows_per_second": row["input_rows_per_second"],
            "processed_rows_per_second": row["processed_rows_per_second"],
            "batch_duration_ms": row["batch_duration_ms"],
            "kafka_lag": row["kafka_lag"],
            "kafka_lag_by_partition": json.loads(row["kafka_lag_by_partition"])
            if row["kafka_lag_by_partition"] else None,
            "watermark": row["watermark"],
        }
    gold = queries.get("gold") or {}
    verdict, _ = _latest_dq(home, name)
    return {**status, "progress": queries, "watermark": gold.get("watermark"),
            "quarantine": _quarantine_share(home, name), "dq": verdict}


def overview_all(home: WeirHome, *, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    return [overview(home, name, now=now) for name in catalog.names()]


def _series(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Per query, per measure: (time, value) points in time order, None values left out."""
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for row in rows:
        stamp = row["progress_at"] or row["recorded_at"]
        per_query = out.setdefault(row["query"], {m: [] for m in SERIES})
        for measure in SERIES:
            if row[measure] is not None:
                per_query[measure].append((iso(stamp), float(row[measure])))
    return out


def _checkpoint(home: WeirHome, name: str) -> dict[str, Any]:
    """Generation, the last committed batch of each query and the backups (newest first)."""
    pipeline = catalog.load(name)
    queries = {}
    for query in queries_of(pipeline):
        folder = checkpoint_location(home, pipeline, query)
        queries[query] = {"path": str(folder), "exists": folder.is_dir(),
                          "last_committed_batch": layout.last_committed(folder) if folder.is_dir() else None}
    found = backups.list_backups(home, name)
    return {"generation": current_generation(home, name), "queries": queries,
            "backups": [m.as_dict() for m in reversed(found)]}


def detail(home: WeirHome, name: str, *, now: dt.datetime | None = None,
           window: dt.timedelta = WINDOW) -> dict[str, Any]:
    """A pipeline's page: its overview, the window's progress as plot series, the newest
    batches, the tail of its event log, its latest DQ results, its checkpoint and its actions."""
    now = now or dt.datetime.now(dt.UTC)
    rows = progress.read(home, name, since=now - window)
    events = eventlog.read(home, name)[-EVENT_TAIL:]
    _, dq_rows = _latest_dq(home, name)
    dates = sorted({d for r in dq_rows for d in (r["date_from"], r["date_to"])})
    head = overview(home, name, now=now)
    return {
        **head,
        "window": {"from": iso(now - window), "to": iso(now)},
        "series": _series(rows),
        "batches": [_plain_row({k: r[k] for k in (
            "query", "batch_id", "progress_at", "num_input_rows", "input_rows_per_second",
            "processed_rows_per_second", "batch_duration_ms", "watermark", "kafka_lag")})
            for r in reversed(rows[-RECENT_BATCHES:])],
        "events": [{**_plain_row(e), "details": e.get("details")} for e in reversed(events)],
        "dq_results": dq_rows,
        "checkpoint": _checkpoint(home, name),
        "actions": [a.as_dict(name) for a in actions.for_pipeline(
            name, date_from=dates[0] if dates else None, date_to=dates[-1] if dates else None)],
    }
