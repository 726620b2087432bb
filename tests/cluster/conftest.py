"""The production profile's servers for a test module: PostgreSQL and Redis started by the
project's own script (infra/cluster/services.sh) on free ports, data under a throw-away WEIR_HOME
that the `postgres` OS user can traverse (PostgreSQL refuses to run as root); YARN (a
ResourceManager and a NodeManager from Hadoop's artifacts, infra/yarn); all stopped at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs.control.backends import DriverHandle, YarnBackend
from spark_jobs.home import REPO_ROOT
from spark_jobs.ports import free_ports

SERVICES = REPO_ROOT / "infra" / "cluster" / "services.sh"
YARN = REPO_ROOT / "infra" / "yarn" / "yarn.py"


@dataclass(frozen=True)
class ClusterServices:
    """Running PostgreSQL + Redis of one test module."""

    root: Path
    pg_port: int
    redis_port: int

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "WEIR_HOME": str(self.root), "WEIR_PG_PORT": str(self.pg_port),
                "WEIR_REDIS_PORT": str(self.redis_port)}

    def run(self, action: str) -> str:
        out = subprocess.run([str(SERVICES), action], env=self.env, capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, f"services.sh {action}: {out.stderr}{out.stdout}"
        return out.stdout

    def database_url(self, database: str) -> str:
        return f"postgresql://weir@127.0.0.1:{self.pg_port}/{database}"

    def create_database(self, prefix: str) -> str:
        """A fresh database (one per test scope keeps control states apart); its URL."""
        import psycopg2

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        conn = psycopg2.connect(self.database_url("postgres"))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.database_url(name)


@pytest.fixture(scope="module")
def cluster_services() -> Iterator[ClusterServices]:
    root = Path(tempfile.mkdtemp(prefix="weir-cluster-"))
    root.chmod(0o755)  # the postgres user reaches its data folder through it
    pg_port, redis_port = free_ports(2)
    services = ClusterServices(root, pg_port, redis_port)
    try:
        services.run("start")
        yield services
    finally:
        services.run("stop")
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class YarnCluster:
    """A running ResourceManager + NodeManager: what `yarn.py start --json` reported."""

    state: dict

    @property
    def backend(self) -> YarnBackend:
        return YarnBackend(self.state["rm_url"])

    @property
    def env(self) -> dict[str, str]:
        """What a spark-submit on this host needs to submit to this YARN in cluster mode."""
        return {"HADOOP_CONF_DIR": self.state["conf_dir"],
                "AIRFLOW_CONN_SPARK_DEFAULT": self.state["airflow_conn_spark_default"]}

    def apps(self, states: str | None = None) -> list[dict]:
        query = f"?states={states}" if states else ""
        url = f"{self.state['rm_url']}/ws/v1/cluster/apps{query}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return list((json.loads(response.read()).get("apps") or {}).get("app") or [])

    def running(self) -> list[dict]:
        return self.apps("NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING")

    def kill_all(self) -> None:
        for app in self.running():
            self.backend.kill(DriverHandle("yarn", app["id"], self.state["rm_url"]))


@pytest.fixture(scope="module")
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[YarnCluster]:
    """One ResourceManager and NodeManager for the module, in a home of their own."""
    env = {**os.environ, "WEIR_HOME": str(tmp_path_factory.mktemp("yarn-home"))}
    started = subprocess.run([sys.executable, str(YARN), "start", "--json"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:] + started.stdout[-3000:]
    cluster = YarnCluster(json.loads(started.stdout.strip().splitlines()[-1]))
    try:
        yield cluster
    finally:
        cluster.kill_all()
        subprocess.run([sys.executable, str(YARN), "stop"], env=env, timeout=120, check=False)
