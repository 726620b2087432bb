"""A real single-node Kafka broker (infra/kafka) for the whole session, and a topic per test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from spark_jobs.home import WeirHome
from tests.kafka.harness import BROKER, Broker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    root = tmp_path_factory.mktemp("kafka-broker")
    env = {**os.environ, "WEIR_HOME": str(root)}
    subprocess.run([sys.executable, str(BROKER), "install"], env=env, check=True, timeout=600)
    started = subprocess.run([sys.executable, str(BROKER), "start", "--json"], env=env,
                             capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, f"broker did not start: {started.stderr[-3000:]}"
    state = json.loads(started.stdout.strip().splitlines()[-1])
    b = Broker(WeirHome(root), state["bootstrap_servers"])
    try:
        yield b
    finally:
        subprocess.run([sys.executable, str(BROKER), "stop"], env=env, timeout=120, check=False)


@pytest.fixture
def topic() -> str:
    return f"weir-test-{uuid.uuid4().hex[:8]}"


