"""Airflow for the control-plane tests: the repo's plugins folder on sys.path (as Airflow puts it),
a throw-away AIRFLOW_HOME, and the Spark master of `spark_default` as a small local one."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))
# Always a throw-away one: never migrate or write a developer's exported AIRFLOW_HOME.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="weir-airflow-test-")
atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(REPO / "plugins"))


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The metadata DB of this run's AIRFLOW_HOME, migrated once for the modules that share it (the
    auth manager checks every token against its revoked-token table, the DAG tests store runs)."""
    from tests.airflow.airflow_services import migrated_db

    migrated_db(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db")
