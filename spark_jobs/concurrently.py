"""Independent Spark actions side by side, on threads of the driver: the ingest batch's writes
(`stream.IngestBatch`) and a back-fill's layers (`backfill`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pyspark.util import inheritable_thread_target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def run_concurrently(actions: dict[str, Callable[[], object]], *, what: str,
                     spark: SparkSession) -> dict[str, object]:
    """Run independent Spark actions on their own threads (their jobs, Delta commits and planning
    overlap instead of queueing) and return their results by name. The first failure is raised
    once every action has ended, so none is left writing behind a failed batch.

    Each thread carries a copy of the calling thread's local properties and `spark`'s tags
    (`inheritable_thread_target`): in a query's foreachBatch, its job group (a stop cancels the
    query's jobs by it, and the Spark UI lists them under it), its scheduler pool and its SQL
    execution, as on the query's own thread. A copy each: a thread's SQL executions set their id
    in its properties, and threads sharing one set of them would take each other's ids."""
    with ThreadPoolExecutor(max_workers=len(actions), thread_name_prefix="weir-write") as pool:
        futures = {name: pool.submit(inheritable_thread_target(spark)(action))
                   for name, action in actions.items()}
    failed = [(name, f.exception()) for name, f in futures.items() if f.exception() is not None]
    for name, err in failed[1:]:
        log.error("%s: %s failed too: %s", what, name, err)
    if failed:
        raise failed[0][1]  # type: ignore[misc]
    return {name: f.result() for name, f in futures.items()}
