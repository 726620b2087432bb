"""`make up` with the Kafka profile, end to end: `infra/airflow/up.sh` in a temp WEIR_HOME starts
the broker, the producer and Airflow, deploys `playback_kafka` through its P_stream DAG; once the
stream is RUNNING and silver has rows, Ctrl-C (SIGINT) stops the stream, the producer, Airflow
and the broker — nothing of that home is left running and no port still answers."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.ports import free_ports
from tests.kafka.harness import delta_row_count
from tests.support.make_up import answers, make_up, processes_of

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]
WEIR = REPO_ROOT / ".venv" / "bin" / "weir"


def status(env: dict[str, str]) -> dict:
    done = subprocess.run([str(WEIR), "status", "playback_kafka", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 else {"state": f"error: {done.stderr[-200:]}"}


def test_make_up_kafka_profile_deploys_the_stream_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    home = WeirHome(tmp_path / "weir")
    airflow_port, kafka_port = free_ports(2)
    settings = {"WEIR_UP_PROFILE": "kafka", "WEIR_AIRFLOW_PORT": str(airflow_port),
                "WEIR_KAFKA_PORT": str(kafka_port),
                # one producer round: batch 0 holds it all, so the stop at a batch boundary is quick
                "WEIR_GENERATE_EVERY_S": "3600"}
    silver = home.table("silver", "playback_kafka_events")
    with make_up(home, tmp_path / "up.log", **settings) as made:
        up, env = made.process, made.env
        deadline = time.monotonic() + 480
        state, rows = {}, 0
        while time.monotonic() < deadline and up.poll() is None:
            state = status(env)
            rows = delta_row_count(silver)
            if state.get("state") == "RUNNING" and rows > 0:
                break
            time.sleep(5)
        tail = made.tail()
        assert up.poll() is None, f"up.sh exited ({up.returncode}) early:\n{tail}"
        assert state.get("state") == "RUNNING" and rows > 0, f"status {state}, silver {rows}:\n{tail}"
        assert json.loads((home.kafka / "broker.json").read_text())["port"] == kafka_port
        assert answers(kafka_port) and answers(airflow_port)

        code = made.ctrl_c()
        text = made.log.read_text(errors="replace")
        assert code == 130, text[-3000:]
        assert "kafka stopped" in text and "weir up: stopped." in text, text[-3000:]
        assert status(env)["state"] == "STOPPED"
        left = processes_of(home.root)
        assert not left, f"still running after Ctrl-C: {left}"
        assert not answers(kafka_port) and not answers(airflow_port)
