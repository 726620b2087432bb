"""What data quality costs next to the stream it checks.

One UTC day of realistic playback events (≥ 1M valid silver rows at full size) goes through the
stream (`stream.run(p, once=True)`: landing → bronze/quarantine/silver → gold), then `run_dq`
validates that day's silver and gold with the playback suites — in the same process, on the
same Spark session and the same data. Validating must cost less than the stream's own processing:
the ratio `dq_s / stream_s` is printed and must stay below 1.

    .venv/bin/python -m bench.dq_cost [--quick] [--workdir DIR]

`measure(quick=, workdir=)` is the entry point of the benchmark harness (`python -m bench.worker dq`).
The first `run_dq` of a process is the one counted (it pays for creating the GE context, as an
Airflow task does); a second, warm run is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import datasets

log = logging.getLogger(__name__)
FULL = datasets.Size(files=280, sessions_per_file=400)     # ~1.1M events over one day
QUICK = datasets.Size(files=12, sessions_per_file=40)      # a smoke: a few thousand events
MIN_FULL_SILVER_ROWS = 1_000_000


def measure(*, quick: bool = False, workdir: Path) -> dict[str, Any]:
    """Stream one day, validate it; seconds, rows and their ratio (JSON-serialisable)."""
    from pyspark.sql import functions as F

    from spark_jobs import catalog, stream
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import PipelineTables
    from spark_jobs.quality import run_dq
    from spark_jobs.session import build_session

    size = QUICK if quick else FULL
    workdir = workdir.absolute()
    home = WeirHome(workdir / "weir")
    shutil.rmtree(home.root, ignore_errors=True)
    home.root.mkdir(parents=True)
    started = time.monotonic()
    dataset = datasets.make(workdir / "data", "dq_day", size, seed=7)
    datasets.link_into(dataset, home.landing("playback"))
    generate_s = time.monotonic() - started

    pipeline = catalog.load("playback")
    spark = build_session("weir-bench-dq", conf={
        "spark.sql.shuffle.partitions": str(pipeline.shuffle_partitions),
        "spark.driver.memory": "4g", "spark.ui.enabled": "false"})
    try:
        started = time.monotonic()
        stream.run(pipeline, once=True, home=home, spark=spark)
        stream_s = time.monotonic() - started
        log.info("dq_cost: stream processed the day in %.1fs", stream_s)
        tables = PipelineTables.of(home, pipeline)
        day = datasets.DAY
        silver_rows = (spark.read.format("delta").load(str(tables.silver))
                       .where(F.col("event_date") == F.lit(day)).count())
        gold_rows = (spark.read.format("delta").load(str(tables.gold))
                     .where(F.col("event_date") == F.lit(day)).count())

        started = time.monotonic()
        report = run_dq("playback", day, day, home=home, spark=spark, freshness=False)
        dq_s = time.monotonic() - started
        log.info("dq_cost: %d silver rows, stream %.1fs, dq %.1fs, ratio %.3f",
                 silver_rows, stream_s, dq_s, dq_s / stream_s)
        started = time.monotonic()
        warm = run_dq("playback", day, day, home=home, spark=spark, freshness=False)
        dq_warm_s = time.monotonic() - started
    finally:
        spark.stop()
    result = {
        "quick": quick,
        "day": day.isoformat(),
        "landing_lines": dataset.lines,
        "landing_mb": round(dataset.bytes / 1e6, 1),
        "silver_rows": silver_rows,
        "gold_rows": gold_rows,
        "generate_s": round(generate_s, 1),
        "stream_s": round(stream_s, 1),
        "dq_s": round(dq_s, 1),
        "dq_warm_s": round(dq_warm_s, 1),
        "ratio": round(dq_s / stream_s, 3),
        "ratio_warm": round(dq_warm_s / stream_s, 3),
        "seconds_per_million_rows": round(dq_s / max(silver_rows, 1) * 1e6, 1),
        "expectations": len(report.outcomes),
        "dq_success": report.success and warm.success,
        "dq_failed": report.failed,
        "enough_rows": quick or silver_rows >= MIN_FULL_SILVER_ROWS,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dq_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few thousand events (a smoke)")
    parser.add_argument("--workdir", type=Path, help="where data and WEIR_HOME go (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="weir-dq-cost-"))
    try:
        result = measure(quick=args.quick, workdir=workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"stream {result['stream_s']}s for {result['silver_rows']} silver rows; "
          f"dq {result['dq_s']}s (warm {result['dq_warm_s']}s); ratio dq/stream {result['ratio']} "
          f"(warm {result['ratio_warm']})")
    ok = result["ratio"] < 1 and result["dq_success"] and result["enough_rows"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
