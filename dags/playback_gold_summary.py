"""An analyst's DAG: runs whenever new gold data of `playback` lands (the stream's commits, seen by
the table's asset watcher, or a back-fill) and summarises it with SQL, without Spark (`deltalake`).

An example to copy: schedule on the asset, read the table as of the version the event names, and
summarise the windows that are new (the last minutes before gold's newest window, or the dates a
back-fill re-derived). Declarations only at import: the reads happen inside the task.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, get_current_context, task
from weir_airflow.assets import pipeline_assets

from spark_jobs import catalog
from spark_jobs.control import platform_tables
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


def summarise(table_path: Path, version: int | None, dates: list[tuple[str, str]]) -> dict[str, Any]:
    """Totals of the gold windows that are new: those of back-filled `dates`, else the last
    `RECENT` before the newest window of the table as of `version` (latest when None). SQL over
    the Delta table, run by delta-rs (`platform_tables.select`): only the columns it names are read,
    and the Delta log's statistics skip the files of other dates. The log is read once, and both
    queries read that version."""
    from deltalake import DeltaTable

    table = DeltaTable(str(table_path), version=version)
    if dates:
        new = " OR ".join(f"event_date BETWEEN DATE '{dt.date.fromisoformat(first)}' "
                          f"AND DATE '{dt.date.fromisoformat(last)}'" for first, last in dates)
    else:
        recent = int(RECENT.total_seconds())
        new = f"window_end > (SELECT max(window_end) FROM t) - INTERVAL '{recent} seconds'"
    totals, = platform_tables.select(table, f"""
        SELECT count(*) AS row_count, count(DISTINCT window_start) AS windows,
               min(window_start) AS window_from, max(window_end) AS window_to,
               coalesce(sum(events), 0) AS events, coalesce(sum(plays), 0) AS plays,
               coalesce(sum(errors), 0) AS errors, coalesce(sum(rebuffer_ms), 0) AS rebuffer_ms
        FROM t WHERE {new}""")
    worst = platform_tables.select(table, f"""
        SELECT coalesce(cdn, 'unknown') AS cdn, sum(errors) AS errors FROM t WHERE {new}
        GROUP BY 1 HAVING sum(errors) > 0 ORDER BY errors DESC, cdn LIMIT 1""")
    events, errors = totals["events"], totals["errors"]
    return {
        "version": table.version(), "rows": totals["row_count"], "windows": totals["windows"],
        "from": totals["window_from"].isoformat() if totals["window_from"] else None,
        "to": totals["window_to"].isoformat() if totals["window_to"] else None,
        "events": events, "plays": totals["plays"], "errors": errors,
        "error_rate": round(errors / events, 4) if events else None,
        "rebuffer_ms": totals["rebuffer_ms"],
        "most_errors_cdn": worst[0]["cdn"] if worst else None,
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
        summary = summarise(gold, new["version"], new["dates"])
        log.info("%s gold %s (run %s): %s", PIPELINE, GOLD.name, context["run_id"], summary)
        return summary

    summarise_new_gold()
