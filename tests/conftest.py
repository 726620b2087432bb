"""One tuned, session-scoped SparkSession for the whole run, and a fresh WEIR_HOME per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.home import WeirHome
from tests.support import jit

os.environ.setdefault("WEIR_SPARK_LOG_LEVEL", "ERROR")
jit.for_started_drivers()
REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", str(REPO / ".venv" / "bin" / "python"))
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.memory": "2g",
    # a setting of the driver's own, as a pipeline's configuration may carry one: it adds to Weir's
    # JVM options and must not replace them (tests/integration/test_jvm_options.py). The session
    # lives for the whole run: it keeps C2, where the drivers tests start run C1 only (`jit`).
    "spark.driver.extraJavaOptions": f"-Dweir.tests.own-option=kept {jit.LONG_LIVED}",
}


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.session import build_session

    session = build_session("weir-tests", master="local[2]", conf=TEST_CONF)
    yield session
    session.stop()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WeirHome]:
    root = tmp_path / "weir"
    root.mkdir()
    monkeypatch.setenv("WEIR_HOME", str(root))
    yield WeirHome(root)


# A driver a test launched logs to the test's home, which CI does not keep: a failed test's report
# carries the end of each such log, where a driver's own error stands.
DRIVER_LOG_TAIL_LINES = 60


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    home = getattr(item, "funcargs", {}).get("home")
    if report.failed and isinstance(home, WeirHome) and home.logs.is_dir():
        for log in sorted(home.logs.glob("*-driver-*.log")):
            tail = log.read_text(errors="replace").splitlines()[-DRIVER_LOG_TAIL_LINES:]
            report.sections.append((f"driver log {log.name} (last {len(tail)} lines)", "\n".join(tail)))
    return report


# `make test` runs the suite on xdist workers (one per core), a module (or a group of modules
# that cannot run side by side) to a unit of work, the longest units first:
# tests/support/scheduling.py.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.support.scheduling import unit, unit_seconds

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return  # in one process the order stays the files' own
    weight = unit_seconds(item.nodeid for item in items)
    items.sort(key=lambda item: -weight[unit(item.nodeid)])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from tests.support.scheduling import scheduler

    return scheduler(config, log)
