"""`weir generate P`: write realistic landing files (with bad and duplicate lines) for P."""

from __future__ import annotations

import argparse
import json

from spark_jobs.generator import generate
from spark_jobs.home import WeirHome


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="write demo events into a pipeline's landing folder",
                              description=__doc__)
    p.add_argument("pipeline", choices=["playback"], help="pipeline with a generator")
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--sessions-per-file", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    written = generate(WeirHome.from_env().landing(args.pipeline), files=args.files,
                       sessions_per_file=args.sessions_per_file, seed=args.seed)
    summary = {"files": len(written.files), "lines": written.lines, "bad_lines": written.bad_lines,
               "duplicate_lines": written.duplicate_lines, "events": len(written.event_ids)}
    print(json.dumps(summary) if args.json else
          f"wrote {summary['lines']} lines in {summary['files']} files "
          f"({summary['bad_lines']} bad, {summary['duplicate_lines']} duplicates)")
    return 0
