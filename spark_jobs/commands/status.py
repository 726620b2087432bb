"""`weir status [P] [--json]`: state, driver pid, restarts and per-query progress of pipelines."""

from __future__ import annotations

import argparse
import json

from spark_jobs.commands import pipeline_arg
from spark_jobs.control.status import all_status
from spark_jobs.home import WeirHome


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("status", help="show the state of pipelines' streams", description=__doc__)
    p.add_argument("pipeline", nargs="?", type=pipeline_arg, help="one pipeline (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON (a list, or one object with P)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    statuses = all_status(WeirHome.from_env(), [args.pipeline] if args.pipeline else None)
    if args.json:
        print(json.dumps(statuses[0] if args.pipeline else statuses, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Weir pipelines")
    for column in ("pipeline", "state", "driver pid", "restarts", "query", "last batch",
                   "last progress (UTC)"):
        table.add_column(column)
    colours = {"RUNNING": "green", "STARTING": "cyan", "STALLED": "yellow", "RESTARTING": "yellow",
               "STOPPING": "cyan", "FAILED": "red"}
    for status in statuses:
        queries = status["queries"] or [{"name": "-", "last_batch_id": None, "last_progress_at": None}]
        for index, query in enumerate(queries):
            first = index == 0
            state = status["state"]
            table.add_row(
                status["pipeline"] if first else "",
                f"[{colours.get(state, 'white')}]{state}[/]" if first else "",
                str(status["driver_pid"] or "-") if first else "",
                str(status["restarts"]) if first else "",
                query["name"], "-" if query["last_batch_id"] is None else str(query["last_batch_id"]),
                query["last_progress_at"] or "-")
    Console().print(table)
    return 0
