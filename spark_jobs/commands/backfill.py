"""`weir backfill P --from DATE --to DATE`: re-derive silver, quarantine and gold for those event
dates from bronze (safe beside the running stream; event-logged)."""

from __future__ import annotations

import argparse
import json

from spark_jobs import catalog
from spark_jobs.commands import iso_date, pipeline_arg
from spark_jobs.errors import UserError
from spark_jobs.session import build_session


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "backfill", help="re-derive silver, quarantine and gold for a range of event dates",
        description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--from", dest="date_from", type=iso_date, required=True, metavar="YYYY-MM-DD")
    p.add_argument("--to", dest="date_to", type=iso_date, required=True, metavar="YYYY-MM-DD")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    from spark_jobs.backfill import backfill, word
    from spark_jobs.timing import describe

    if args.date_to < args.date_from:
        raise UserError(f"--to {args.date_to} is before --from {args.date_from}")
    pipeline = catalog.load(args.pipeline)
    console = Console(stderr=True)
    with console.status(f"back-filling {pipeline.name} {args.date_from}..{args.date_to}"):
        spark = build_session(f"weir-backfill-{pipeline.name}")
        result = backfill(spark, pipeline, args.date_from, args.date_to)
    if args.json:
        print(json.dumps({"pipeline": result.pipeline, "from": str(result.date_from),
                          "to": str(result.date_to), "silver_replaced": result.silver_replaced,
                          "quarantine_replaced": result.quarantine_replaced,
                          "gold_replaced": result.gold_replaced, "bronze_version": result.bronze_version,
                          "lines_read": result.lines_read, "seconds": result.seconds,
                          "elapsed_s": result.elapsed_s}))
    else:
        print(f"{pipeline.name} {result.date_from}..{result.date_to}: "
              f"silver {word(result.silver_replaced)}, quarantine {word(result.quarantine_replaced)}, "
              f"gold {word(result.gold_replaced)}; {result.lines_read:,} bronze line(s) read, "
              f"{result.elapsed_s:.1f}s ({describe(result.seconds)})")
    return 0
