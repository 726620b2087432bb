"""Table maintenance at Weir's session settings: a VACUUM lists a table in a handful of tasks.

Spark's default lists paths in up to 10,000 tasks a stage, and Delta's VACUUM uses it: `weir
maintain` ran 170,099 tasks for a table of 3 partitions and took minutes on a home of a few files
(`spark_jobs.session.BASE_CONF`). The session here is built by `build_session` with those settings
(`tests/conftest.py` adds none that touch listing)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path


def test_a_vacuum_lists_a_table_in_a_handful_of_tasks_not_ten_thousand(spark, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "events")
    for day in range(3):   # three partitions, a few files each
        rows = [(i, dt.date(2026, 11, 1 + day)) for i in range(20)]
        spark.createDataFrame(rows, "id long, event_date date").repartition(2).write.format("delta") \
            .mode("append").partitionBy("event_date").save(path)

    context = spark.sparkContext
    group = f"vacuum-{tmp_path.name}"
    context.setJobGroup(group, "a VACUUM whose tasks are counted")
    try:
        DeltaTable.forPath(spark, path).vacuum(168.0)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    tracker = context.statusTracker()
    # a job or stage the status store no longer holds was dropped among the oldest, in a session
    # that has run many; a stage it never held ran no task (skipped: its output was reused)
    jobs = [info for info in map(tracker.getJobInfo, tracker.getJobIdsForGroup(group)) if info is not None]
    stages = [tracker.getStageInfo(stage) for job in jobs for stage in job.stageIds]
    tasks = [info.numTasks for info in stages if info is not None]
    # Delta lists a table level by level, each listing a stage of its own: many small stages
    assert tasks and max(tasks) <= 16, f"{sum(tasks)} tasks in {len(tasks)} stages, at most {max(tasks)}"
    assert spark.read.format("delta").load(path).count() == 60
