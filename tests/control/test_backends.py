"""Driver backends without a cluster: the local process backend on real processes, the choice of
backend from the master, the YARN backend's configuration and its answer when the
ResourceManager is out of reach. (The YARN backend against a real YARN: tests/cluster/
test_celery_postgres.py.)"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import pytest

from spark_jobs.control.backends import (
    ClusterUnreachableError,
    DriverHandle,
    DriverState,
    LocalProcessBackend,
    YarnBackend,
    backend_for,
)
from spark_jobs.session import submitted


def test_a_local_driver_is_tracked_and_killed_by_pid_and_start_time(tmp_path: Path) -> None:
    backend = LocalProcessBackend()
    launched = backend.launch([sys.executable, "-c", "import time; time.sleep(60)"], env={},
                              log_path=tmp_path / "driver.log", cwd=tmp_path, log_mode=0o600)
    handle = launched.handle
    assert handle.backend == "local" and int(handle.id) == launched.launcher.pid
    assert backend.state(handle) is DriverState.RUNNING and handle.alive() is True
    # A handle whose start time is not the process's (a recycled pid) is never signalled.
    recycled = DriverHandle("local", handle.id, handle.where, (handle.start_ticks or 0) + 1)
    assert not backend.kill(recycled, signal.SIGKILL)
    assert backend.state(handle) is DriverState.RUNNING
    assert backend.kill(handle, signal.SIGKILL)
    assert backend.wait_ended(handle, 10)
    assert handle.alive() is False and backend.adopt(handle) is None


def test_the_master_chooses_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(backend_for("local[2]"), LocalProcessBackend)
    assert isinstance(backend_for("spark://127.0.0.1:7077"), LocalProcessBackend)
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    with pytest.raises(ClusterUnreachableError, match="HADOOP_CONF_DIR"):
        backend_for("yarn")
    (tmp_path / "yarn-site.xml").write_text(
        '<?xml version="1.0"?><configuration><property><name>yarn.resourcemanager.webapp.address'
        "</name><value>127.0.0.1:18188</value></property></configuration>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    backend = backend_for("yarn")
    assert isinstance(backend, YarnBackend) and backend.rm_url == "http://127.0.0.1:18188"


def test_an_unreachable_resource_manager_is_unknown_not_dead() -> None:
    """No answer from YARN proves nothing: the driver is not declared dead (nor killed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    handle = DriverHandle("yarn", "application_1_0001", f"http://127.0.0.1:{port}")
    assert handle.state() is DriverState.UNKNOWN and handle.alive() is None
    assert not YarnBackend(handle.where).kill(handle)


def test_a_driver_started_by_sparks_python_runner_keeps_the_submitted_master(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In cluster deploy mode no spark-submit script runs where the driver starts (a YARN
    container): the gateway Spark's PythonRunner opened tells it was submitted."""
    for name in ("SPARK_ENV_LOADED", "PYSPARK_GATEWAY_PORT", "PYSPARK_SUBMIT_ARGS"):
        monkeypatch.delenv(name, raising=False)
    assert not submitted()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40123")
    assert submitted()
