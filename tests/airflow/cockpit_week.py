"""How fast the cockpit answers for a pipeline with a week of progress history: writes a week of
`stream_progress` rows for `playback` (two queries, one batch each per trigger interval, appended
in time order with the platform-table writer), then times the overview and the pipeline page.

    PYTHONPATH=. .venv/bin/python -m tests.airflow.cockpit_week [--commit-every-min 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from pathlib import Path

from spark_jobs.cockpit import pipeline_view
from spark_jobs.control import platform_tables, progress
from spark_jobs.home import WeirHome

QUERIES = ("playback_ingest", "playback_gold")


def write_week(home: WeirHome, *, now: dt.datetime, trigger_s: int, commit_every_min: int) -> tuple[int, int]:
    """A week of progress ending at `now`: (rows, commits)."""
    start = now - dt.timedelta(days=7)
    step, chunk = dt.timedelta(seconds=trigger_s), dt.timedelta(minutes=commit_every_min)
    batch, rows_written, commits = 0, 0, 0
    moment = start
    while moment < now:
        rows = []
        end = min(moment + chunk, now)
        while moment < end:
            for query in QUERIES:
                row = progress.progress_row("playback", {
                    "name": query, "id": query, "runId": "week", "batchId": batch,
                    "timestamp": moment.isoformat().replace("+00:00", "Z"), "numInputRows": 500,
                    "inputRowsPerSecond": 100.0, "processedRowsPerSecond": 180.0,
                    "durationMs": {"triggerExecution": 2700}, "sources": [], "stateOperators": [],
                    "eventTime": {"watermark": (moment - dt.timedelta(minutes=10)).isoformat()}},
                    driver_pid=1)
                row["recorded_at"] = moment
                rows.append(row)
            batch += 1
            moment += step
        platform_tables.append(progress.table_path(home), rows, progress.schema())
        rows_written += len(rows)
        commits += 1
    return rows_written, commits


def timed(call, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trigger-s", type=int, default=5)
    parser.add_argument("--commit-every-min", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    home = WeirHome(Path(tempfile.mkdtemp(prefix="weir-cockpit-week-")))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    started = time.perf_counter()
    rows, commits = write_week(home, now=now, trigger_s=args.trigger_s,
                               commit_every_min=args.commit_every_min)
    written_s = time.perf_counter() - started
    files = len(list(progress.table_path(home).glob("*.parquet")))
    overview = timed(lambda: pipeline_view.overview(home, "playback", now=now), args.repeat)
    detail = timed(lambda: pipeline_view.detail(home, "playback", now=now), args.repeat)
    # The same history seen two days after its last batch (a pipeline stopped since then).
    later = now + dt.timedelta(days=2)
    stopped = timed(lambda: pipeline_view.overview(home, "playback", now=later), args.repeat)
    others = timed(lambda: pipeline_view.overview_all(home, now=now), args.repeat)
    whole = timed(lambda: progress.read(home, "playback"), 1)
    shown = pipeline_view.detail(home, "playback", now=now)
    print(json.dumps({
        "rows": rows, "commits": commits, "parquet_files": files, "write_s": round(written_s, 1),
        "window_batches": sum(len(s["batch_duration_ms"]) for s in shown["series"].values()),
        "overview_s": {"median": round(statistics.median(overview), 3), "max": round(max(overview), 3)},
        "detail_s": {"median": round(statistics.median(detail), 3), "max": round(max(detail), 3)},
        "overview_stopped_2_days_s": {"median": round(statistics.median(stopped), 3),
                                      "max": round(max(stopped), 3)},
        "overview_all_pipelines_s": {"median": round(statistics.median(others), 3),
                                     "max": round(max(others), 3)},
        "whole_history_read_s": round(whole[0], 3), "weir_home": str(home.root),
    }, indent=2))


if __name__ == "__main__":
    main()
