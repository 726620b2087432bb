"""`weir checkpoint ACTION P ...`: see, trust, save and move a pipeline's streaming checkpoint.

A thin layer over `spark_jobs.checkpoints.run_action`: tables for people, `--json` for machines,
`--result-file` for the Airflow tasks that submit it as a Spark job. Destructive actions (restore,
rewind, reset, prune) need `--yes`, accept `--dry-run`, back up the live checkpoint first and
refuse while P runs; Airflow submits them after an approval with `--approved-by NAME
--approval-reason TEXT`, kept in the action's event.
Exit codes: 0 done / healthy / compatible, 1 unhealthy (validate) or incompatible (compat),
2 a refused or impossible request.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spark_jobs.checkpoints import run_action
from spark_jobs.checkpoints.inspection import KEY_SETTINGS
from spark_jobs.commands import add_result_file, pipeline_arg, write_result
from spark_jobs.control.eventlog import default_actor

HELP = {
    "inspect": "per query: path, batches, source position, state operators (rows, size), pinned settings",
    "validate": "exit 0 when the checkpoint is healthy, else name each problem and its file",
    "backup": "copy every query's checkpoint at a batch boundary (safe while the stream runs); prints the id",
    "backups": "list backups: id, time, batch ids, table versions, size",
    "restore": "continue from a backup's position (checkpoint only; the stream must be stopped)",
    "rewind": "restore the checkpoint AND the Delta tables to a backup (undo a bad deploy)",
    "reset": "start a new checkpoint generation from earliest|latest|TIMESTAMP (old one kept as a backup)",
    "prune": "keep the newest N backups (old generations included)",
    "compat": "before a deploy: does the current code fit the checkpoint? (exit 1 when not)",
}
DESTRUCTIVE = ("restore", "rewind", "reset", "prune")
DRY_RUNNABLE = ("backup", *DESTRUCTIVE)
REASONED = ("backup", *DESTRUCTIVE)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("checkpoint", help="inspect, validate, back up, restore, rewind, "
                                   "reset, prune a pipeline's checkpoint", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in HELP.items():
        p = actions.add_parser(action, help=text, description=text)
        p.add_argument("pipeline", type=pipeline_arg)
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        add_result_file(p)
        if action == "restore":
            p.add_argument("backup_id", metavar="BACKUP_ID", help="a backup id, or `latest`")
        if action == "rewind":
            p.add_argument("--to", dest="backup_id", required=True, metavar="BACKUP_ID",
                           help="the backup taken before the bad deploy (or `latest`)")
        if action == "reset":
            p.add_argument("--from", dest="reset_from", required=True, metavar="earliest|latest|TIMESTAMP",
                           help="source position: all files/offsets, only new ones, or those after a "
                                "time (ISO-8601, UTC when naive; or epoch ms)")
        if action == "prune":
            p.add_argument("--keep", type=int, required=True, metavar="N", help="backups to keep")
        if action in DESTRUCTIVE:
            p.add_argument("--yes", action="store_true", help="confirm the destructive action")
        if action in DRY_RUNNABLE:
            p.add_argument("--dry-run", action="store_true", help="say what would happen, change nothing")
        if action in REASONED:
            p.add_argument("--reason", help="why (kept in the event log)")
        if action in DESTRUCTIVE:
            add_approval(p)
        p.set_defaults(handler=handle)


def add_approval(parser: argparse.ArgumentParser) -> None:
    """`--approved-by NAME --approval-reason TEXT`: the approval an Airflow step gave this run (it
    submits the command with `--yes` once a person approved the plan), kept in the action's event."""
    parser.add_argument("--approved-by", metavar="NAME",
                        help="who approved it (Airflow's approval step), for the event log")
    parser.add_argument("--approval-reason", metavar="TEXT", help="the approver's reason, for the event log")


def approval_of_args(args: argparse.Namespace) -> dict[str, Any] | None:
    """The approval given on the command line, in the event log's form, or None."""
    by = getattr(args, "approved_by", None)
    if not by:
        return None
    return {"decision": "Approve", "by": by, "reason": getattr(args, "approval_reason", None) or None}


def approval_options(approval: dict[str, Any] | None) -> list[str]:
    """The `weir` options that carry `approval` (as `approval_of_args` reads them back)."""
    if not approval:
        return []
    options = [f"--approved-by={approval['by']}"]    # `=`: a name or reason may start with a dash
    if approval.get("reason"):
        options.append(f"--approval-reason={approval['reason']}")
    return options


def command_line(pipeline: str, action: str, *, backup_id: str | None = None,
                 reset_from: str | None = None, keep: int | None = None, dry_run: bool = False,
                 confirm: bool = False, reason: str | None = None,
                 approval: dict[str, Any] | None = None) -> list[str]:
    """`weir` arguments for `run_action`'s keywords (how Airflow submits an action): each option
    only where the action's parser has it, as `run_action` ignores it elsewhere."""
    args = ["checkpoint", action, pipeline]
    if action == "restore" and backup_id:
        args.append(backup_id)
    if action == "rewind" and backup_id:
        args.append(f"--to={backup_id}")
    if action == "reset" and reset_from:
        args.append(f"--from={reset_from}")
    if action == "prune" and keep is not None:
        args.append(f"--keep={keep}")
    if action in DESTRUCTIVE and confirm:
        args.append("--yes")
    if action in DRY_RUNNABLE and dry_run:
        args.append("--dry-run")
    if action in REASONED and reason:
        args.append(f"--reason={reason}")   # `=`: a reason may start with a dash
    if action in DESTRUCTIVE:
        args.extend(approval_options(approval))
    return args


@contextmanager
def copy_progress(console: Any, enabled: bool) -> Iterator[Any]:
    """A progress bar for long copies on a terminal; nothing otherwise."""
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("copying checkpoint"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("copy", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total or None)


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console


    err = Console(stderr=True)
    with copy_progress(err, args.action in ("backup", "restore", "rewind", "reset")) as progress:
        slow = args.action in ("inspect", "compat", "rewind") and err.is_terminal
        status = err.status(f"{args.action} {args.pipeline}…") if slow else _nothing()
        with status:
            result = run_action(
                args.pipeline, args.action, backup_id=getattr(args, "backup_id", None),
                reset_from=getattr(args, "reset_from", None), keep=getattr(args, "keep", None),
                dry_run=getattr(args, "dry_run", False), confirm=getattr(args, "yes", False),
                actor=default_actor(), reason=getattr(args, "reason", None),
                approval=approval_of_args(args), progress=progress)
    write_result(args.result_file, result)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        # A pipe or a log gets full-width rows rather than 80 columns of wrapped cells.
        SHOW.get(args.action, _show_plan)(Console(width=None if sys.stdout.isatty() else 200), result)
    if args.action == "validate" and not result["healthy"]:
        return 1
    if args.action == "compat" and not result["compatible"]:
        return 1
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _time_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _show_inspect(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table


    gen = result["generation"]
    console.print(f"[bold]{result['pipeline']}[/] checkpoint generation {gen.get('generation')} "
                  f"({gen.get('origin')})")
    for name, q in result["queries"].items():
        if q.get("missing"):
            console.print(f"\n[bold]{name}[/]: no checkpoint yet ({q['path']})")
            continue
        table = Table(title=f"query {name}", show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        table.add_row("path", q["path"])
        table.add_row("last committed batch", str(q["last_committed_batch"]))
        table.add_row("planned, not committed", str(q["planned_uncommitted_batch"] or "-"))
        table.add_row("last batch time", _time_ms(q.get("batch_timestamp_ms")))
        table.add_row("watermark", _time_ms(q.get("watermark_ms")))
        for i, s in enumerate(q["sources"]):
            if s["kind"] == "files":
                at = s["position"]
                text = (f"files: {s['files_seen']} of {s['files_discovered']} discovered reached "
                        f"(at file {at['file']}, byte {at['byte']}), newest read {s['newest_file']}")
            elif s["kind"] == "kafka":
                text = "kafka: " + ", ".join(f"{k}@{v}" for k, v in sorted(s["offsets"].items()))
            elif s["kind"] == "delta":
                text = f"delta table {s['table_id']} at version {s['version']} (index {s['index']})"
            else:
                text = json_text(s)
            table.add_row(f"source {i}", text)
        for op in q["state_operators"]:
            table.add_row(f"state operator {op['operator_id']}",
                          f"{op.get('name', '?')}: {op.get('rows', '?')} rows, {op.get('partitions')} "
                          f"partitions, {_size(op.get('bytes'))} in {op.get('files')} files"
                          + (f" [red]({op['error']})[/]" if op.get("error") else ""))
        table.add_row("files", f"{q['files']} ({_size(q['bytes'])})")
        for key in KEY_SETTINGS:
            if key in q["pinned_settings"]:
                table.add_row(f"pinned {key.removeprefix('spark.sql.')}", q["pinned_settings"][key])
        console.print(table)


def json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _show_validate(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    if not result["queries"]:
        console.print(f"{result['pipeline']}: no checkpoint yet (nothing to validate)")
    if result["problems"]:
        table = Table(title=f"{result['pipeline']} checkpoint problems", title_justify="left")
        for column in ("severity", "query", "file", "problem"):
            table.add_column(column)
        for p in result["problems"]:
            colour = "red" if p["severity"] == "error" else "yellow"
            table.add_row(f"[{colour}]{p['severity']}[/]", p["query"] or "-", p["file"], p["problem"])
        console.print(table)
    verdict = "[green]healthy[/]" if result["healthy"] else "[red]NOT healthy[/]"
    console.print(f"{result['pipeline']}: {verdict} ({', '.join(result['queries']) or 'no queries'})")


def _show_backup(console: Any, result: dict[str, Any]) -> None:
    if result.get("dry_run"):
        console.print(f"would copy batches {result['would_copy']}")
        return
    if result["id"] is None:
        console.print(result["skipped"])
        return
    print(result["id"])


def _show_backups(console: Any, result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{result['pipeline']} backups (oldest first)", title_justify="left")
    for column in ("id", "time", "kind", "batches", "table versions", "size"):
        table.add_column(column)
    for b in result["backups"]:
        table.add_row(b["id"], b["created_at"], b["kind"],
                      ", ".join(f"{q} {c['batch']}" for q, c in b["queries"].items()),
                      ", ".join(f"{t} v{v}" for t, v in b["table_versions"].items()
                                if v is not None and t != "dim"),
                      _size(b["bytes"]))
    console.print(table)
    if not result["backups"]:
        console.print("no backups yet: `weir checkpoint backup " + result["pipeline"] + "`")


def _show_compat(console: Any, result: dict[str, Any]) -> None:
    colour = "green" if result["compatible"] else "red"
    console.print(f"{result['pipeline']}: [{colour}]{result['verdict']}[/]")
    for r in result["reasons"]:
        console.print(f"  - [{r['verdict']}] {r['query']}: {r['reason']}")


def _show_plan(console: Any, result: dict[str, Any]) -> None:
    """Restore, rewind, reset, prune: what was (or, with --dry-run, would be) done."""
    head = "DRY RUN, nothing changed: " if result.get("dry_run") else ""
    console.print(f"{head}{result['action']} {result['pipeline']}")
    for key, value in result.items():
        if key not in ("action", "pipeline", "dry_run"):
            console.print(f"  {key}: {json_text(value)}")


SHOW = {"inspect": _show_inspect, "validate": _show_validate, "backup": _show_backup,
        "backups": _show_backups, "compat": _show_compat}
