"""`weir dq P [--from DATE --to DATE] [--json]`: validate a pipeline's silver and gold with its
Great Expectations suites. Exit 0 when no `fail` expectation failed, 1 when one did (each failed
expectation is named with its table), 2 on a usage error. Results go to
`tables/platform/dq_results`, Data Docs to `WEIR_HOME/dq/docs/index.html`; with `--result-file`
the report's JSON also goes to a file (how an Airflow task reads back a submitted run)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from spark_jobs.commands import add_result_file, iso_date, pipeline_arg, write_result
from spark_jobs.errors import UserError
from spark_jobs.quality import NoDataError, run_dq
from spark_jobs.quality.suites import SuiteError

if TYPE_CHECKING:
    from spark_jobs.quality import DqReport

EXIT_FAILED = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dq", help="check a pipeline's silver and gold with its expectation suites",
                              description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--from", dest="date_from", type=iso_date, metavar="YYYY-MM-DD",
                   help="first event date (default: the newest partition)")
    p.add_argument("--to", dest="date_to", type=iso_date, metavar="YYYY-MM-DD",
                   help="last event date (default: --from, or the newest partition)")
    freshness = p.add_mutually_exclusive_group()
    freshness.add_argument("--freshness", dest="freshness", action="store_true", default=None,
                           help="check freshness even if the stream is not running")
    freshness.add_argument("--no-freshness", dest="freshness", action="store_false",
                           help="skip freshness even if the stream is running")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_result_file(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console


    if args.date_from and args.date_to and args.date_to < args.date_from:
        raise UserError(f"--to {args.date_to} is before --from {args.date_from}")
    console = Console(stderr=True)
    try:
        with console.status(f"validating {args.pipeline}"):
            report = run_dq(args.pipeline, args.date_from, args.date_to, freshness=args.freshness)
    except (NoDataError, SuiteError) as err:
        raise UserError(str(err)) from None
    write_result(args.result_file, report.to_dict())
    if args.json:
        print(json.dumps(report.to_dict(), default=str))
    else:
        show(report)
    return 0 if report.success else EXIT_FAILED


def show(report: DqReport) -> None:
    """A table of every expectation, then the verdict naming each failed `fail` expectation."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(title=f"{report.pipeline} {report.date_from}..{report.date_to}  (run {report.run_id})")
    for column in ("table", "expectation", "severity", "result", "observed", "unexpected"):
        table.add_column(column, overflow="fold")
    for o in report.outcomes:
        verdict = "[green]pass[/]" if o.success else (
            "[red]FAIL[/]" if o.severity == "fail" else "[yellow]warn[/]")
        table.add_row(escape(o.table), escape(o.expectation), o.severity, verdict,
                      escape(o.error or o.observed_value or ""),
                      "" if o.unexpected_count is None else f"{o.unexpected_count}/{o.element_count}")
    console.print(table)
    if not report.stream_running:
        console.print("freshness: not checked (stream not running; --freshness forces it)")
    console.print(f"Data Docs: {report.docs_path}", highlight=False)
    if report.success:
        extra = f" ({len(report.warnings)} warning(s))" if report.warnings else ""
        console.print(f"[green]{report.pipeline}: all fail-severity expectations passed{extra}[/]")
    else:
        Console(stderr=True).print(f"[red]{report.pipeline}: {len(report.failed)} expectation(s) failed:[/]")
        for name in report.failed:
            Console(stderr=True).print(f"  {name}", highlight=False)
