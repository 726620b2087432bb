"""What `weir --help` and Airflow's API server load: none of the heavy engines (DAG parsing is
checked in tests/airflow/test_dag_integrity.py).
Imports sit at module top so the dependency graph is visible; this test is what keeps that from
pulling Spark, Delta, Great Expectations or the Kafka client into processes that never use them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pyspark", "delta", "great_expectations", "confluent_kafka", "py4j")
PROBE = """
import json, sys
{load}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))))
"""


def loaded_heavy_modules(load: str, tmp_path: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'plugins'}",
           "AIRFLOW_HOME": str(tmp_path / "airflow"), "WEIR_HOME": str(tmp_path / "weir")}
    done = subprocess.run([sys.executable, "-c", PROBE.format(load=load, heavy=HEAVY)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("what, load", [
    ("the CLI (weir --help)", "import spark_jobs.cli"),
    ("the plugin (api-server, scheduler)", "import weir_plugin"),
])
def test_no_heavy_engine_is_imported_by(what: str, load: str, tmp_path: Path) -> None:
    assert loaded_heavy_modules(load, tmp_path) == [], f"{what} imports a heavy engine"
