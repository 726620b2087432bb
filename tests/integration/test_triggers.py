"""Each query of a running driver is started on its own trigger: the ingest on the entry's
`trigger_interval`, gold and the sessions on `derived_trigger_interval` (docs/performance.md, "The
deployed driver's latency"); and each query's jobs, on whichever of its threads, are the query's."""

from __future__ import annotations

import dataclasses

from spark_jobs.generator import generate
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


def job_groups_since(spark, first_job: int) -> list[str | None]:
    """The job group of each job Spark ran from `first_job` on (the driver's status store, as the
    Spark UI lists them)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(spark._jvm.java.util.ArrayList())
    return [job.jobGroup().get() if job.jobGroup().isDefined() else None
            for job in (jobs.apply(i) for i in range(jobs.size())) if job.jobId() >= first_job]


def unfinished_sql_executions(spark) -> set[int]:
    """The SQL executions the driver's status store holds as still running (the Spark UI's SQL tab)."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return {e.executionId() for e in (executions.apply(i) for i in range(executions.size()))
            if not e.completionTime().isDefined()}


def test_every_job_of_a_query_is_in_its_job_group(spark, home) -> None:
    """The ingest's writes run on threads of their own (`concurrently.run_concurrently`, beside the warm-up
    of silver's key hashes); they carry the query's local properties: its job group, by which a
    stop cancels the query's jobs and the Spark UI lists them, and its scheduler pool. None of their
    SQL executions is left running once the queries stop."""
    pipeline = playback(trigger="1 second")
    tables = ensure_tables(spark, home, pipeline)
    generate(home.landing(pipeline.name), files=2, sessions_per_file=4, seed=3)
    first_job = max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1
    unfinished_before = unfinished_sql_executions(spark)
    started = {name: start_query(spark, pipeline, home, tables, name, once=False)
               for name in queries_of(pipeline)}
    try:
        for query in started.values():
            query.processAllAvailable()
    finally:
        for query in started.values():
            query.stop()
    groups = job_groups_since(spark, first_job)
    assert set(groups) == {str(query.runId) for query in started.values()}
    assert groups.count(str(started["ingest"].runId)) > 10
    assert unfinished_sql_executions(spark) <= unfinished_before
