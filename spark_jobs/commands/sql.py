"""`weir sql [-e QUERY]`: Spark SQL over every Weir table, by name (`silver.playback_events`),
with time travel (`SELECT * FROM gold.playback_qoe_1m VERSION AS OF 3`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.session import build_session
from spark_jobs.sql import register_tables, split_statements

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sql", help="interactive Spark SQL over the tables (or -e QUERY)",
                              description=__doc__)
    p.add_argument("-e", "--execute", metavar="QUERY", help="run QUERY (statements split on ;) and exit")
    p.add_argument("--json", action="store_true", help="print result rows as JSON lines")
    p.add_argument("--limit", type=int, default=1000, help="rows shown per query (default 1000)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from pyspark.errors import PySparkException
    from rich.console import Console


    console = Console()
    with Console(stderr=True).status("starting Spark"):
        spark = build_session("weir-sql", conf={"spark.sql.shuffle.partitions": "4"})
        names = register_tables(spark, WeirHome.from_env())
    if args.execute is not None:
        try:
            for statement in split_statements(args.execute):
                _show(spark, statement, args, console)
        except PySparkException as err:
            raise UserError(_first_line(err)) from None
        return 0
    console.print(f"[bold]weir sql[/] — tables: {', '.join(names) or 'none yet'}. "
                  "End statements with ';', quit with \\q or Ctrl-D.", highlight=False)
    buffer = ""
    while True:
        try:
            line = input("weir> " if not buffer else "   -> ")
        except EOFError:
            print()
            return 0
        if line.strip() in ("\\q", "quit", "exit") and not buffer:
            return 0
        buffer += line + "\n"
        if not buffer.rstrip().endswith(";"):
            continue
        for statement in split_statements(buffer):
            try:
                _show(spark, statement, args, console)
            except PySparkException as err:
                console.print(f"[red]error:[/] {_first_line(err)}", highlight=False)
        buffer = ""


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]


def _show(spark: SparkSession, statement: str, args: argparse.Namespace, console: object) -> None:
    from rich.table import Table

    df = spark.sql(statement)
    rows = df.limit(args.limit).collect()
    if args.json:
        for row in rows:
            sys.stdout.write(json.dumps(row.asDict(recursive=True), default=str) + "\n")
        return
    table = Table(*df.columns, show_lines=False)
    for row in rows:
        table.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(table)  # type: ignore[attr-defined]
    console.print(f"{len(rows)} row(s)", style="dim")  # type: ignore[attr-defined]
