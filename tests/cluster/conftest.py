"""The production profile's servers for a test module: PostgreSQL and Redis started by the
project's own script (infra/cluster/services.sh) on free ports, data under a throw-away WEIR_HOME
that the `postgres` OS user can traverse (PostgreSQL refuses to run as root), stopped at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs.home import REPO_ROOT
from tests.support.ports import free_ports

SERVICES = REPO_ROOT / "infra" / "cluster" / "services.sh"


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
