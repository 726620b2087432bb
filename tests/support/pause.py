"""A Spark UDF that holds a write open: the task evaluating it waits (up to two minutes) until a
file appears, so a test can commit something else while a writer's transaction is open."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def pausing_udf(opened: Path, release: Path) -> Any:
    """A string identity UDF that touches `opened` when first evaluated, then waits until
    `release` exists."""
    from pyspark.sql import functions as F

    @F.udf("string")
    def paused(value: str) -> str:
        opened.touch()
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return value

    return paused
