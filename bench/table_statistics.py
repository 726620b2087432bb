"""`python -m bench.table_statistics [--files N] [--rounds R]`: what a Delta write of one ingest
batch's bronze and silver rows costs with statistics of every column (Delta's default, the first
32) against statistics of the columns Weir's reads skip files by (`layers.statistics_columns`,
docs/performance.md).

The platform's generator writes N landing files (default 10, about 507 k lines: one 128 MB batch);
their lines are parsed as the stream parses them and cached. Each round appends the batch's bronze
rows and its silver rows (valid, deduplicated, enriched) to fresh tables made by `ensure_tables`,
once as Weir makes them and once with the property unset, in turns (the order flips each round).
Printed per round and way, as one JSON line: the seconds and the driver JVM's CPU seconds of each
write (`/proc`: a local session's tasks run in it); then the medians of the rounds after the first
(the JIT's). Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

WAYS = ("every column", "weir's")


def jvm_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.table_statistics", description=__doc__)
    parser.add_argument("--files", type=int, default=10, help="landing files of 4,650 sessions")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of both ways (the first is the JIT's)")
    args = parser.parse_args(argv)
    from pyspark.sql import functions as F

    from bench import workloads
    from spark_jobs import transforms
    from spark_jobs.generator import generate
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import ensure_tables, read_dimension
    from spark_jobs.quality import rules as row_rules
    from spark_jobs.session import build_session
    from spark_jobs.sources import bronze_columns
    from spark_jobs.tables import STATS_COLUMNS, delta_identifier

    spark = build_session("weir-bench-table-statistics", master="local[2]", conf=workloads.session_conf())
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    root = Path(tempfile.mkdtemp(prefix="weir-table-statistics-"))
    try:
        landing = root / "landing"
        generate(landing, files=args.files, sessions_per_file=4650, seed=11)
        pipeline = workloads.playback()
        lines = spark.read.text(str(landing))
        batch = bronze_columns(lines, value=F.col("value"), source=F.col("_metadata.file_path"),
                               position=F.monotonically_increasing_id())
        parsed = row_rules.with_rules(transforms.parse(batch, pipeline), pipeline.row_rules).persist()
        print(json.dumps({"lines": parsed.count()}), flush=True)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:
                home = WeirHome(root / f"home-{round_}-{WAYS.index(way)}")
                home.root.mkdir()
                tables = ensure_tables(spark, home, pipeline)
                rows = {"bronze": transforms.bronze_rows(parsed, pipeline),
                        "silver": transforms.silver(parsed, read_dimension(spark, tables), pipeline)}
                for layer, frame in rows.items():
                    path = getattr(tables, layer)
                    if way == "every column":
                        spark.sql(f"ALTER TABLE {delta_identifier(path)} UNSET TBLPROPERTIES "
                                  f"('{STATS_COLUMNS}')")
                    cpu, started = jvm_cpu_s(pid), time.monotonic()
                    frame.write.format("delta").mode("append").save(str(path))
                    took = (time.monotonic() - started, jvm_cpu_s(pid) - cpu)
                    times.setdefault((layer, way), []).append(took)
                    print(json.dumps({"round": round_, "layer": layer, "statistics": way,
                                      "seconds": round(took[0], 2), "cpu_s": round(took[1], 2)}),
                          flush=True)
                shutil.rmtree(home.root)
        for (layer, way), runs in sorted(times.items()):
            warm = runs[1:] or runs
            print(json.dumps({"layer": layer, "statistics": way, "rounds": len(warm),
                              "median_seconds": round(statistics.median(t for t, _ in warm), 2),
                              "median_cpu_s": round(statistics.median(c for _, c in warm), 2)}))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
