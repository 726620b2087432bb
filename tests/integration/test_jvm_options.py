"""Weir's JVMs run with `spark_jobs.session.JVM_OPTIONS`: the throughput collector and C2 inlining
less deeply. On two cores G1 and C2's deep inlining took about a fifth of the ingest's time
(docs/performance.md); these check that the options reach the JVM, not only the configuration.
The test session sets a driver option of its own (`tests/conftest.py`), as a pipeline's Spark
settings may: it comes after Weir's and replaces none of them."""

from __future__ import annotations

import os
from pathlib import Path

from spark_jobs.jars import class_archive
from tests.support import jit


def _vm_option(spark, name: str) -> str:
    """A HotSpot option of the session's JVM, as the JVM itself reports it."""
    jvm = spark._jvm
    diagnostic = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return str(diagnostic.getVMOption(name).getValue())


def test_the_session_jvm_collects_with_the_parallel_collector(spark) -> None:
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = sorted(str(bean.getName()) for bean in beans)
    assert names == ["PS MarkSweep", "PS Scavenge"], names


def test_the_session_jvm_inlines_only_smaller_methods(spark) -> None:
    options = {name: _vm_option(spark, name) for name in ("InlineSmallCode", "FreqInlineSize")}
    assert options == {"InlineSmallCode": "1000", "FreqInlineSize": "150"}, options


def test_the_drivers_tests_start_inherit_c1_only() -> None:
    """`tests.support.jit`: set in the environment every driver a test starts inherits."""
    assert jit.SHORT_LIVED in os.environ["SPARK_SUBMIT_OPTS"].split()


def test_the_jvms_a_cluster_manager_starts_get_c1_through_conf_a_submit_can_override(spark) -> None:
    """A YARN application master (the driver in cluster mode) and the executors do not inherit
    `SPARK_SUBMIT_OPTS`, only its `spark.*` properties as conf defaults; the session's own driver
    options (its `--conf`) still win over them."""
    assert jit.SHORT_LIVED in spark.conf.get("spark.executor.extraJavaOptions").split()
    assert jit.LONG_LIVED in spark.conf.get("spark.driver.extraJavaOptions").split()


def test_the_long_lived_session_jvm_keeps_c2(spark) -> None:
    """Its own option comes after `SPARK_SUBMIT_OPTS`, and the later one wins."""
    assert _vm_option(spark, "TieredStopAtLevel") == "4"


def test_a_driver_option_of_the_sessions_own_is_added_to_weirs(spark) -> None:
    system = spark._jvm.java.lang.System
    assert str(system.getProperty("weir.tests.own-option")) == "kept"
    assert str(system.getProperty("user.timezone")) == "UTC"


def test_the_session_jvm_maps_the_class_archive_make_setup_recorded(spark) -> None:
    archive = class_archive()
    assert archive.is_file(), f"{archive} missing: `make setup` records it"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    # A JVM that cannot use the archive (other jars, another JDK) unmaps it and loads every class
    # from the jars: only a mapped archive is one in use.
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
