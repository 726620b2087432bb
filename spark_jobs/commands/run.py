"""`weir run P [--once]`: run a pipeline's stream through every layer."""

from __future__ import annotations

import argparse

from spark_jobs.commands import pipeline_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="run a pipeline's stream (Ctrl-C/SIGTERM stops it at a batch boundary)",
        description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--once", action="store_true",
                   help="process everything available through every layer, then exit")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from spark_jobs import catalog, stream

    stop = stream.stop_on_signals()
    stream.run(catalog.load(args.pipeline), once=args.once, stop=stop)
    return 0
