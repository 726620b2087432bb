"""Each query of a running driver is started on its own trigger: the ingest on the entry's
`trigger_interval`, gold and the sessions on `derived_trigger_interval` (docs/performance.md, "The
deployed driver's latency")."""

from __future__ import annotations

import dataclasses

from spark_jobs.layers import ensure_tables
from spark_jobs.stream import start_query
from spark_jobs.topology import queries_of
from tests.integration.pipelines import playback


def trigger_ms(query) -> int:
    """The processing-time interval Spark runs `query` on (its StreamExecution's trigger)."""
    return int(query._jsq.streamingQuery().trigger().intervalMs())


def test_the_derived_queries_run_on_their_own_trigger(spark, home) -> None:
    pipeline = dataclasses.replace(playback(trigger="1 second"), derived_trigger_interval="1 hour")
    tables = ensure_tables(spark, home, pipeline)
    started = {name: start_query(spark, pipeline, home, tables, name, once=False)
               for name in queries_of(pipeline)}
    try:
        assert {name: trigger_ms(q) for name, q in started.items()} == {
            "ingest": 1_000, "gold": 3_600_000, "sessions": 3_600_000}
    finally:
        for query in started.values():
            query.stop()
