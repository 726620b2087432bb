"""`weir produce P --from DIR`: publish landing-style JSON-lines files to P's Kafka topic, one
record per line (bad and duplicate lines included, as a real feed would send them)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spark_jobs import catalog, kafka
from spark_jobs.catalog import KafkaSource
from spark_jobs.commands import pipeline_arg
from spark_jobs.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("produce", help="publish JSON-lines files to a Kafka pipeline's topic",
                              description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--from", dest="source_dir", type=Path, required=True,
                   help="folder of *.jsonl files (hidden and _-prefixed files are skipped), or one file")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(handler=handle)


def _files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise UserError(f"{source} is neither a file nor a folder")
    files = sorted(p for p in source.iterdir()
                   if p.is_file() and not p.name.startswith((".", "_")))
    if not files:
        raise UserError(f"no files to produce in {source}")
    return files


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    pipeline = catalog.load(args.pipeline)
    source = pipeline.source
    if not isinstance(source, KafkaSource):
        raise UserError(f"pipeline {pipeline.name} reads {source.kind}, not Kafka")
    files = _files(args.source_dir)
    conn = kafka.connection(source)
    created = kafka.ensure_topic(conn, source.topic, source.partitions)
    total = sum(1 for f in files for _ in kafka.landing_lines(f))
    produced = kafka.Produced()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), transient=True, disable=args.json or not sys.stderr.isatty(),
                  console=Console(stderr=True)) as progress:
        task = progress.add_task(f"{source.topic}", total=total)
        for path in files:
            one = kafka.produce_lines(conn, source.topic, kafka.landing_lines(path),
                                      on_delivered=lambda n: progress.advance(task, n))
            produced.messages += one.messages
            produced.bytes += one.bytes
    summary = {"pipeline": pipeline.name, "topic": source.topic, "bootstrap": conn.bootstrap_servers,
               "files": len(files), "records": produced.messages, "bytes": produced.bytes,
               "topic_created": created}
    print(json.dumps(summary) if args.json else
          f"produced {produced.messages} records from {len(files)} file(s) to {source.topic} "
          f"on {conn.bootstrap_servers}" + (" (topic created)" if created else ""))
    return 0
