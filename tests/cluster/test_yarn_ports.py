"""YARN keeps its ports across restarts, and a port taken meanwhile does not stop it starting."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.home import REPO_ROOT
from spark_jobs.ports import free_ports

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

YARN = REPO_ROOT / "infra" / "yarn" / "yarn.py"


def test_a_kept_port_taken_by_another_process_is_drawn_anew(tmp_path: Path) -> None:
    """CI once lost a run to `BindException: Address already in use` in the ResourceManager: a port
    looked up as free was taken before the daemon bound it. Here the previous start's ports are on
    record and another process listens on the ResourceManager's: the start draws new ports."""
    home = tmp_path / "home"
    (home / "yarn").mkdir(parents=True)
    kept = dict(zip(("rm", "rm_web"), free_ports(2), strict=True))  # the others are drawn
    (home / "yarn" / "yarn.json").write_text(json.dumps({
        "rm_pid": 0, "nm_pid": 0, "ports": kept, "rm_url": f"http://127.0.0.1:{kept['rm_web']}",
        "conf_dir": str(home / "yarn" / "conf"), "airflow_conn_spark_default": "{}",
        "started_at": 0.0}))
    env = {**os.environ, "WEIR_HOME": str(home)}
    env.pop("WEIR_YARN_RM_WEB_PORT", None)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", kept["rm"]))
        squatter.listen()
        try:
            started = subprocess.run([sys.executable, str(YARN), "start", "--json"], env=env,
                                     capture_output=True, text=True, timeout=300)
            assert started.returncode == 0, started.stderr[-3000:]
            state = json.loads(started.stdout.strip().splitlines()[-1])
            assert "drawing new ports" in started.stderr
            assert state["ports"]["rm"] != kept["rm"]
            assert len(set(state["ports"].values())) == len(state["ports"]) == 9
        finally:
            subprocess.run([sys.executable, str(YARN), "stop"], env=env, timeout=120, check=False)
