"""Weir's JVMs run with `spark_jobs.session.JVM_OPTIONS`: the throughput collector and C2 inlining
less deeply. On two cores G1 and C2's deep inlining took about a fifth of the ingest's time
(docs/performance.md); these check that the options reach the JVM, not only the configuration.
The test session sets a driver option of its own (`tests/conftest.py`), as a pipeline's Spark
settings may: it comes after Weir's and replaces none of them."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pyspark

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


# Run by spark-submit as a driver's Python: it asks the driver JVM (through the gateway spark-submit
# opened for it, without starting Spark) for its own options and for the JVM options it would give
# the JVMs a cluster manager starts.
_PROBE = """
import json
from pyspark.java_gateway import launch_gateway
jvm = launch_gateway().jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
flags = {name: str(bean.getVMOption(name).getValue())
         for name in ("TieredStopAtLevel", "ReservedCodeCacheSize")}
conf = {name: str(jvm.java.lang.System.getProperty(f"spark.{name}.extraJavaOptions"))
        for name in ("driver", "executor")}
print("PROBE " + json.dumps({**flags, **conf}))
"""


def _final_flags(*options: str) -> dict[str, str]:
    """A JVM's final HotSpot flags when started with `options`."""
    out = subprocess.run(["java", *options, "-XX:+PrintFlagsFinal", "-version"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return {words[1]: words[3] for words in (line.split() for line in out.splitlines()) if len(words) >= 4}


def test_a_driver_a_test_starts_runs_c1_with_the_code_cache_c2_would_have(tmp_path: Path) -> None:
    """`tests.support.jit`: C1 alone would shrink the code cache to 48 MB, which a driver that
    streams for minutes fills and dies of (CI: "Out of space in CodeCache")."""
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    out = subprocess.run([str(submit), str(probe)], capture_output=True, text=True, timeout=300)
    reports = [line for line in out.stdout.splitlines() if line.startswith("PROBE ")]
    assert out.returncode == 0 and reports, out.stderr[-3000:]
    driver = json.loads(reports[-1].removeprefix("PROBE "))
    assert driver["TieredStopAtLevel"] == "1"
    assert int(driver["ReservedCodeCacheSize"]) >= 240 * 2**20, driver
    # a YARN application master's driver and every executor: the options their JVMs start with
    for jvm in ("driver", "executor"):
        flags = _final_flags(*shlex.split(driver[jvm]))
        assert flags["TieredStopAtLevel"] == "1", (jvm, driver[jvm])
        assert int(flags["ReservedCodeCacheSize"]) >= 240 * 2**20, (jvm, driver[jvm])


def test_the_jvms_a_cluster_manager_starts_get_c1_through_conf_a_submit_can_override(spark) -> None:
    """A YARN application master (the driver in cluster mode) and the executors do not inherit
    `SPARK_SUBMIT_OPTS`, only its `spark.*` properties as conf defaults; the session's own driver
    options (its `--conf`) still win over them."""
    assert set(jit.SHORT_LIVED) <= set(shlex.split(spark.conf.get("spark.executor.extraJavaOptions")))
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
