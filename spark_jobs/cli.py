"""`weir`: the command line of the platform. Every command has `--help`, exits 0 on success and
non-zero with a one-line reason on failure; `--json` where a machine reads the output.

Each subcommand lives in `spark_jobs/commands/<name>.py` with a `register(subparsers)`; heavy
imports (pyspark, delta, great_expectations) happen inside the handlers, so `weir --help` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from spark_jobs.errors import UserError

COMMANDS = (
    "run", "backfill", "sql", "generate", "produce", "status", "stop", "maintain", "checkpoint", "dq",
    "refresh",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weir", description="Streaming pipelines on Spark and Delta Lake, operated from Airflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"spark_jobs.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("WEIR_SPARK_LOG_LEVEL", "ERROR")
    try:
        return int(args.handler(args) or 0)
    except (UserError, FileNotFoundError) as err:
        print(f"weir {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"weir {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
