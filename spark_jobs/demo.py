"""`make demo`: generate a realistic event stream (bad and duplicate lines included), run the
playback stream while it arrives, back-fill the dates it covers with the same transforms, and
print what landed where. Exits 0 within a few minutes."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spark_jobs import catalog, stream
from spark_jobs.backfill import backfill
from spark_jobs.generator import Written, generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

WAVES = 12
FILES_PER_WAVE = 2
SESSIONS_PER_FILE = 40


def _ingested_files(spark: SparkSession, name: str) -> int:
    query = next((q for q in spark.streams.active if q.name == name), None)
    if query is None:
        return 0
    return sum(p["numInputRows"] for p in query.recentProgress)


def _stream_while_generating(spark: SparkSession, home: WeirHome, console: Console) -> Written:
    pipeline = catalog.load("playback")
    stop = threading.Event()
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            stream.run(pipeline, home=home, spark=spark, stop=stop)
        except BaseException as err:  # surfaced in the main thread
            failure.append(err)

    driver = threading.Thread(target=drive, name="weir-demo-stream", daemon=True)
    driver.start()
    written = Written()
    seed = int(time.time())
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) - dt.timedelta(hours=2)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        sent = progress.add_task("landing files written", total=WAVES * FILES_PER_WAVE)
        seen = progress.add_task("landing files ingested", total=WAVES * FILES_PER_WAVE)
        for wave in range(WAVES):
            written.add(generate(home.landing("playback"), files=FILES_PER_WAVE,
                                 sessions_per_file=SESSIONS_PER_FILE, seed=seed + wave,
                                 start=start + dt.timedelta(minutes=10 * wave), prefix="demo"))
            progress.update(sent, completed=len(written.files))
            progress.update(seen, completed=_ingested_files(spark, "playback_ingest"))
            time.sleep(1.0)
        deadline = time.monotonic() + 300
        while (done := _ingested_files(spark, "playback_ingest")) < len(written.files):
            if failure or time.monotonic() > deadline:
                break
            progress.update(seen, completed=done)
            time.sleep(0.5)
        progress.update(seen, completed=_ingested_files(spark, "playback_ingest"))
    stop.set()
    driver.join()
    if failure:
        raise failure[0]
    return written


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    console = Console()
    home = WeirHome.from_env()
    pipeline = catalog.load("playback")
    tables = PipelineTables.of(home, pipeline)
    console.rule("[bold]Weir demo[/] — playback pipeline on the embedded default")
    console.print(f"WEIR_HOME = {home.root}")
    with console.status("starting Spark (local, Delta)"):
        spark = build_session("weir-demo", conf={"spark.sql.shuffle.partitions": "4"})
    started = time.monotonic()
    written = _stream_while_generating(spark, home, console)
    with console.status("finishing the stream: every layer up to date (gold included)"):
        stream.run(pipeline, once=True, home=home, spark=spark)
    silver = spark.read.format("delta").load(str(tables.silver))
    dates = sorted(r[0] for r in silver.select("event_date").distinct().collect())
    with console.status(f"back-filling {dates[0]}..{dates[-1]} from bronze with the same transforms"):
        result = backfill(spark, pipeline, dates[0], dates[-1], home=home)

    counts = Table(title="rows per table", title_justify="left")
    counts.add_column("table")
    counts.add_column("rows", justify="right")
    for path in tables.named().values():
        rows = spark.read.format("delta").load(str(path)).count()
        counts.add_row(f"{PipelineTables.layer(path)}.{path.name}", f"{rows:,}")
    console.print(counts)
    console.print(f"this run wrote {written.lines:,} lines: {written.bad_lines} bad (→ quarantine), "
                  f"{written.duplicate_lines} duplicates (→ deduplicated), "
                  f"{len(written.event_ids):,} distinct valid events")
    verdict = "agreed with the stream (nothing to replace)" if not (
        result.silver_replaced or result.gold_replaced) else "replaced partitions that differed"
    console.print(f"back-fill {result.date_from}..{result.date_to}: {verdict}")

    top = spark.sql(f"""
        SELECT g.content_id, first(d.title) AS title, sum(g.rebuffer_ms) AS rebuffer_ms,
               sum(g.plays) AS plays, sum(g.errors) AS errors
        FROM delta.`{tables.gold}` g LEFT JOIN delta.`{tables.dimension}` d USING (content_id)
        GROUP BY g.content_id ORDER BY rebuffer_ms DESC LIMIT 5""").collect()
    ranking = Table(title="top content by rebuffering", title_justify="left")
    for column in ("content", "title", "rebuffer s", "plays", "errors"):
        ranking.add_column(column, justify="left" if column in ("content", "title") else "right")
    for row in top:
        ranking.add_row(row.content_id, row.title or "?", f"{row.rebuffer_ms / 1000:,.1f}",
                        str(row.plays), str(row.errors))
    console.print(ranking)
    console.print(f"done in {time.monotonic() - started:.0f}s. Query the tables: "
                  "[bold]weir sql -e \"SELECT * FROM gold.playback_qoe_1m LIMIT 10\"[/]")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
