"""`weir stop P [--reason R]`: stop a pipeline's stream at a batch boundary (forcefully after a
timeout); it stays stopped until deployed again (Airflow DAG P_stream)."""

from __future__ import annotations

import argparse
import json

from spark_jobs.commands import pipeline_arg
from spark_jobs.control import eventlog
from spark_jobs.control.stop import GRACEFUL_TIMEOUT_S, stop_driver
from spark_jobs.home import WeirHome


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("stop", help="stop a pipeline's stream at a batch boundary",
                              description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--reason", help="why (written to the event log)")
    p.add_argument("--timeout", type=float, default=GRACEFUL_TIMEOUT_S,
                   help="seconds before SIGTERM, then SIGKILL")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    home = WeirHome.from_env()
    actor = eventlog.default_actor()
    outcome = stop_driver(home, args.pipeline, actor=actor, reason=args.reason,
                          graceful_timeout_s=args.timeout)
    summary = {"pipeline": args.pipeline, "outcome": outcome.outcome, "driver_pid": outcome.driver_pid,
               "seconds": round(outcome.seconds, 1)}
    print(json.dumps(summary) if args.json else
          f"{args.pipeline}: {outcome.outcome.replace('_', ' ')}"
          + (f" (driver pid {outcome.driver_pid}, {outcome.seconds:.1f}s)" if outcome.driver_pid else ""))
    # A driver nobody saw end may still be there (fenced once its lease expires): not a success.
    return 1 if outcome.outcome == "unconfirmed" else 0
