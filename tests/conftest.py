"""One tuned, session-scoped SparkSession for the whole run, and a fresh WEIR_HOME per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.home import WeirHome

os.environ.setdefault("WEIR_SPARK_LOG_LEVEL", "ERROR")
REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", str(REPO / ".venv" / "bin" / "python"))
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.driver.memory": "2g",
    # a setting of the driver's own, as a pipeline's configuration may carry one: it adds to Weir's
    # JVM options and must not replace them (tests/integration/test_jvm_options.py)
    "spark.driver.extraJavaOptions": "-Dweir.tests.own-option=kept",
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


# Under `make test` the suite runs on xdist workers with `--dist loadgroup`. Each module is one
# unit of work, so its module- and session-scoped servers start on one worker only; modules that
# cannot run beside each other name a shared `xdist_group` (the `make up` stacks: they take
# Airflow's default log-server ports). Units are handed out longest first.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.support.durations import module_seconds

    def unit(item: pytest.Item) -> str:
        named = item.get_closest_marker("xdist_group")
        return str(named.args[0]) if named else item.nodeid.split("::")[0]

    recorded = module_seconds()
    weight: dict[str, float] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(unit(item)))
        module = item.nodeid.split("::")[0]
        weight[unit(item)] = weight.get(unit(item), 0.0) + recorded.pop(module, 0.0)
    items.sort(key=lambda item: -weight[unit(item)])
