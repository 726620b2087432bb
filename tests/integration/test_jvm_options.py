"""Weir's JVMs run the throughput collector (`spark_jobs.session.JVM_OPTIONS`): G1, the JVM's
default, cost about a tenth of the ingest's CPU on two cores (docs/performance.md)."""

from __future__ import annotations


def test_the_session_jvm_collects_with_the_parallel_collector(spark) -> None:
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = sorted(str(bean.getName()) for bean in beans)
    assert names == ["PS MarkSweep", "PS Scavenge"], names
