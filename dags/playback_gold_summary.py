"""An analyst's DAG: runs whenever new gold data of `playback` lands (the stream's commits, seen by
the table's asset watcher, or a back-fill) and summarises it without Spark (`deltalake`).

An example to copy: schedule on the asset, read the table as of the version the event names, and
summarise the windows that are new (the last minutes before gold's newest window, or the dates a
back-fill re-derived). Declarations only at import: the reads happen inside the task.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import DAG, get_current_context, task
from weir_airflow.assets import pipeline_assets

from spark_jobs import catalog
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables

log = logging.getLogger(__name__)
PIPELINE = "playback"
GOLD = pipeline_assets(PIPELINE)["gold"]
# How far back from gold's newest window a stream event's summary looks: the windows a minute of
# commits can have added (gold windows close a watermark after their end) and a little more.
RECENT = dt.timedelta(minutes=15)


def new_gold(events: list[Any]) -> dict[str, Any]:
    """What the triggering events say is new: the newest version a watcher saw, and the dates
    back-fills re-derived (each event's extra; watcher events carry theirs under `payload`)."""
    versions, dates = [], []
    for event in events:
        extra = dict(event.extra or {})
        payload = extra.get("payload") or {}
        if isinstance(payload.get("version"), int):
            versions.append(payload["version"])
        if extra.get("from") and extra.get("to"):
            dates.append((extra["from"], extra["to"]))
    return {"version": max(versions) if versions else None, "dates": sorted(set(dates))}


def summarise(table_uri: str, version: int | None, dates: list[tuple[str, str]]) -> dict[str, Any]:
    """Totals of the gold windows that are new: those of back-filled `dates`, else the last
    `RECENT` before the newest window of the table as of `version` (latest when None)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    table = DeltaTable(table_uri, version=version)
    data = table.to_pyarrow_dataset()
    if dates:
        condition = None
        for first, last in dates:
            term = (ds.field("event_date") >= dt.date.fromisoformat(first)) & (
                ds.field("event_date") <= dt.date.fromisoformat(last))
            condition = term if condition is None else condition | term
        rows = data.to_table(filter=condition, use_threads=False)
    else:
        ends = data.to_table(columns=["window_end"], use_threads=False).column("window_end")
        newest = pc.max(ends).as_py() if len(ends) else None
        rows = (data.to_table(filter=ds.field("window_end") > newest - RECENT, use_threads=False)
                if newest is not None else data.to_table(use_threads=False).slice(0, 0))
    events = pc.sum(rows.column("events")).as_py() or 0
    errors = pc.sum(rows.column("errors")).as_py() or 0
    errors_by_cdn: dict[str, int] = {}
    for cdn, count in zip(rows.column("cdn").to_pylist(), rows.column("errors").to_pylist(), strict=True):
        errors_by_cdn[cdn or "unknown"] = errors_by_cdn.get(cdn or "unknown", 0) + (count or 0)
    starts = rows.column("window_start")
    return {
        "version": table.version(), "rows": rows.num_rows,
        "windows": len(set(starts.to_pylist())),
        "from": pc.min(starts).as_py().isoformat() if rows.num_rows else None,
        "to": pc.max(rows.column("window_end")).as_py().isoformat() if rows.num_rows else None,
        "events": events, "plays": pc.sum(rows.column("plays")).as_py() or 0, "errors": errors,
        "error_rate": round(errors / events, 4) if events else None,
        "rebuffer_ms": pc.sum(rows.column("rebuffer_ms")).as_py() or 0,
        "most_errors_cdn": max(errors_by_cdn, key=errors_by_cdn.__getitem__) if errors else None,
    }


with DAG("playback_gold_summary", schedule=[GOLD], catchup=False, max_active_runs=1,
         start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), tags=["weir", PIPELINE, "analyst"],
         description="Summarise new playback gold data each time it lands", doc_md=__doc__,
         default_args={"owner": "analytics", "retries": 1}) as summary_dag:

    @task(task_id="summarise", inlets=[GOLD], multiple_outputs=False)   # one XCom: the summary
    def summarise_new_gold() -> dict[str, Any]:
        context = get_current_context()
        new = new_gold(list(context["triggering_asset_events"].get(GOLD, [])))
        gold = PipelineTables.of(WeirHome.from_env(), catalog.load(PIPELINE)).gold
        summary = summarise(str(gold), new["version"], new["dates"])
        log.info("%s gold %s (run %s): %s", PIPELINE, GOLD.name, context["run_id"], summary)
        return summary

    summarise_new_gold()
