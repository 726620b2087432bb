"""Subcommands of `weir`; see `spark_jobs.cli`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

from spark_jobs import catalog
from spark_jobs.control.submit_secrets import PRIVATE_FILE
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome


def iso_date(text: str) -> dt.date:
    """argparse type for YYYY-MM-DD."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def pipeline_arg(text: str) -> str:
    """argparse type: the name of a pipeline in the catalog."""

    if text not in catalog.names():
        raise argparse.ArgumentTypeError(
            f"no pipeline {text!r} in the catalog (known: {', '.join(catalog.names())})")
    return text


def add_result_file(parser: argparse.ArgumentParser) -> None:
    """`--result-file PATH`: the command's JSON result for the process that submitted it (an
    Airflow task reading back what a spark-submitted `weir` job found)."""
    parser.add_argument("--result-file", type=result_path, metavar="PATH",
                        help="also write the result as JSON to PATH (under WEIR_HOME, mode 0600)")


def result_path(text: str) -> Path:
    """argparse type: a result file under WEIR_HOME, refused before the command does anything."""
    try:
        return WeirHome.from_env().confine(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def write_result(path: Path | None, result: dict[str, Any]) -> None:
    """Write `result` to `path` atomically (a private temporary sibling renamed over it), so the
    reader sees the whole result or none; the path must lie under WEIR_HOME."""
    if path is None:
        return
    target = WeirHome.from_env().confine(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(result, out, sort_keys=True, default=str)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
