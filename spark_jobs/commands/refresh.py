"""`weir refresh P [--from-bronze | --from-source] --dry-run|--yes`: a full refresh as one action.

Refuses while P runs (stop it first), holds P's lease throughout, backs up the live checkpoint,
starts a new checkpoint generation and rebuilds the tables: from bronze (default) silver,
quarantine and gold are re-derived from all of bronze; from the source bronze is re-read too, only
when the source still holds everything bronze has. `--dry-run` prints the plan (checkpoint files
and table versions that change, the backup taken) and changes nothing. Event-logged, with
`--approved-by NAME --approval-reason TEXT` when Airflow submits it after an approval.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from spark_jobs.checkpoints.refresh import refresh
from spark_jobs.commands import add_result_file, pipeline_arg, write_result
from spark_jobs.commands.checkpoint import (
    add_approval,
    approval_of_args,
    approval_options,
    copy_progress,
    json_text,
)
from spark_jobs.control.eventlog import default_actor


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "refresh", help="full refresh: back up, reset the checkpoint, rebuild the tables",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pipeline", type=pipeline_arg)
    origin = p.add_mutually_exclusive_group()
    origin.add_argument("--from-bronze", dest="origin", action="store_const", const="bronze",
                        help="re-derive silver, quarantine and gold from bronze (the default)")
    origin.add_argument("--from-source", dest="origin", action="store_const", const="source",
                        help="re-read bronze from the source's start too (refused when the source "
                             "no longer holds what bronze has)")
    confirm = p.add_mutually_exclusive_group()
    confirm.add_argument("--yes", action="store_true", help="confirm the refresh")
    confirm.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--reason", help="why (kept in the event log)")
    add_approval(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_result_file(p)
    p.set_defaults(handler=handle, origin="bronze")


def command_line(pipeline: str, origin: str, *, dry_run: bool = False, reason: str | None = None,
                 approval: dict[str, Any] | None = None) -> list[str]:
    """`weir` arguments of a refresh (how Airflow submits it): `--dry-run`, or `--yes` with the
    approval it runs under."""
    args = ["refresh", pipeline, f"--from-{origin}", "--dry-run" if dry_run else "--yes"]
    if reason:
        args.append(f"--reason={reason}")    # `=`: a reason may start with a dash
    return [*args, *approval_options(approval)]


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console


    err = Console(stderr=True)
    with copy_progress(err, not args.dry_run) as progress:
        result = refresh(args.pipeline, origin=args.origin, dry_run=args.dry_run, confirm=args.yes,
                         actor=default_actor(), reason=args.reason, approval=approval_of_args(args),
                         progress=progress)
    write_result(args.result_file, result)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
        return 0
    console = Console(width=None if sys.stdout.isatty() else 200)
    head = "DRY RUN, nothing changed: " if result["dry_run"] else ""
    console.print(f"{head}refresh {result['pipeline']} from {args.origin}")
    plan = result["plan"]
    for query, q in plan["checkpoint"].items():
        console.print(f"  checkpoint {query}: {q['files']} file(s), last committed batch "
                      f"{q['last_committed_batch']}; {q['after']}")
    for layer, t in plan["tables"].items():
        console.print(f"  table {layer}: version {t['version']}; {t['after']}")
    backup = json_text(plan["backup"]) if plan["backup"] else "none (no checkpoint yet)"
    console.print(f"  backup first: {backup}")
    console.print(f"  generation: {plan['generation']['from']} -> {plan['generation']['to']}")
    console.print(f"  source: {json_text(plan['source'])}")
    for key in ("safety_backup", "generation", "table_versions"):
        if key in result:
            console.print(f"  done, {key}: {json_text(result[key])}")
    return 0
