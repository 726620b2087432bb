"""A stream deployed through the DAG's task code onto a real Spark standalone cluster (master and
worker from the installed pyspark, on 127.0.0.1), its output checked exactly once, then stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs import catalog
from spark_jobs.control import lease as leases
from spark_jobs.control.driver import read_launch
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import delta_version
from tests.airflow.supervision_harness import DRIVER_CONF, context
from tests.helpers import assert_exactly_once, table
from tests.support.inline import expect_deferred, next_event, tear_down
from tests.support.polling import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
STANDALONE = REPO / "infra" / "spark" / "standalone.py"
P = "playback"


@pytest.fixture
def cluster(home: WeirHome, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    env = {**os.environ, "WEIR_HOME": str(home.root)}
    started = subprocess.run([sys.executable, str(STANDALONE), "start", "--cores", "2", "--memory", "2g",
                              "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:] + started.stdout[-3000:]
    state = json.loads(started.stdout.strip().splitlines()[-1])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", state["airflow_conn_spark_default"])
    try:
        yield state
    finally:
        subprocess.run([sys.executable, str(STANDALONE), "stop"], env=env, timeout=120, check=False)


def test_stream_deployed_through_the_dag_runs_on_the_standalone_cluster(home: WeirHome, spark,
                                                                          cluster: dict) -> None:
    from weir_airflow.operators import StreamStopOperator, StreamSupervisorOperator

    ctx = context()
    written = generate(home.landing(P), files=2, sessions_per_file=4, seed=21, prefix="k")
    conf = {**DRIVER_CONF, "spark.cores.max": "2", "spark.executor.memory": "1g"}
    supervisor = StreamSupervisorOperator(task_id="supervise", pipeline=P, spark_conf=conf)
    tables = PipelineTables.of(home, catalog.load(P))
    try:
        deferred = expect_deferred(supervisor.execute, ctx)
        launch = read_launch(home, P)
        assert launch is not None and f"--master {cluster['master_url']}" in " ".join(launch.command)

        def silver_complete() -> bool:
            if delta_version(tables.silver) is None:
                return False
            ids = {r[0] for r in table(spark, tables.silver).select("event_id").collect()}
            return ids >= written.event_ids

        wait_for("silver filled by the cluster", silver_complete, 600, poll_s=3)
        master_log = (home.root / "spark" / "master.log").read_text(errors="replace")
        assert "Registering app weir-playback" in master_log
        assert "Launching executor" in master_log or "Asked to launch executor" in (
            home.root / "spark" / "worker.log").read_text(errors="replace")

        outcome = StreamStopOperator(task_id="stop", pipeline=P, reason="cluster test done").execute(ctx)
        assert outcome["outcome"] == "graceful"
        assert next_event(deferred.trigger, 30)["verdict"] == "stopped"
        assert leases.holder(home, P) is None
        assert_exactly_once(table(spark, tables.silver), ["event_id"], written.event_ids, "silver")
    finally:
        tear_down(home, P)
