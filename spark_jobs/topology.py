"""The query topology of a pipeline's driver: which streaming queries it runs, what each is called
and where each keeps its checkpoint. The driver, the checkpoint tools and the deploy gate read it
from here; the DataFrames the queries run are built in `spark_jobs.queries`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

# Every query a driver may run, in start order: `gold` and `sessions` read silver, which `ingest`
# writes. `sessions` runs only for a pipeline that declares one (`queries_of`); the checkpoint
# tools iterate over all of them and skip a query whose folder does not exist.
QUERIES = ("ingest", "gold", "sessions")
# gold's aggregation and the sessions' keyed state keep state; ingest is a stateless foreachBatch.
STATEFUL_QUERIES = frozenset({"gold", "sessions"})


def queries_of(pipeline: Pipeline) -> tuple[str, ...]:
    """The queries `pipeline`'s driver runs, in start order."""
    return tuple(q for q in QUERIES if q != "sessions" or pipeline.sessions is not None)


def checkpoint_location(home: WeirHome, pipeline: Pipeline, query: str) -> Path:
    """Where `query` of `pipeline` keeps its checkpoint: the one truth every tool reads."""
    return home.checkpoints(pipeline.name) / query


def query_name(pipeline: Pipeline, query: str) -> str:
    """The streaming query's name, as Spark's progress and Weir's status show it."""
    return f"{pipeline.name}_{query}"


def has_started(home: WeirHome, pipeline: Pipeline, query: str) -> bool:
    """Whether `query` has planned a batch in its checkpoint (Spark then ignores starting options)."""
    return any((checkpoint_location(home, pipeline, query) / "offsets").glob("[0-9]*"))


def has_checkpoint(home: WeirHome, pipeline: Pipeline) -> bool:
    """Whether any query of the pipeline has a checkpoint."""
    return any((checkpoint_location(home, pipeline, q) / "offsets").is_dir() for q in QUERIES)


def existing_checkpoints(home: WeirHome, pipeline: Pipeline) -> dict[str, Path]:
    """Query → checkpoint folder, for the queries whose folder exists."""
    folders = {q: checkpoint_location(home, pipeline, q) for q in QUERIES}
    return {q: f for q, f in folders.items() if f.is_dir()}
