"""Subcommands of `weir`; see `spark_jobs.cli`."""

from __future__ import annotations

import datetime as dt


def iso_date(text: str) -> dt.date:
    """argparse type for YYYY-MM-DD."""
    import argparse

    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def pipeline_arg(text: str) -> str:
    """argparse type: the name of a pipeline in the catalog."""
    import argparse

    from spark_jobs import catalog

    if text not in catalog.names():
        raise argparse.ArgumentTypeError(
            f"no pipeline {text!r} in the catalog (known: {', '.join(catalog.names())})")
    return text
