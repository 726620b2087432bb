"""The Kafka test harness: the broker handle, catalog entries pointing a pipeline at a test topic
(an in-process object and a WEIR_CONF folder for subprocess drivers), a driver subprocess, and
the broker's records read back as the expected set."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs import catalog
from spark_jobs.catalog import KafkaSource, Pipeline, derived_entry
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.kafka import KafkaConnection

BROKER = REPO_ROOT / "infra" / "kafka" / "broker.py"


@dataclass
class Broker:
    """The test broker: its own WEIR_HOME (data, logs) and bootstrap servers."""

    home: WeirHome
    bootstrap: str

    def run(self, action: str) -> str:
        env = {**os.environ, "WEIR_HOME": str(self.home.root)}
        done = subprocess.run([sys.executable, str(BROKER), action], env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, f"broker {action} failed: {done.stderr[-2000:]}"
        return done.stdout

    def stop(self) -> None:
        self.run("stop")

    def start(self) -> None:
        self.run("start")

    @property
    def connection(self) -> KafkaConnection:
        return KafkaConnection(self.bootstrap)


def kafka_pipeline(topic: str, bootstrap: str, **source: object) -> Pipeline:
    """The repository's playback_kafka entry pointed at `topic` on the test broker."""
    base = catalog.load("playback_kafka")
    return dataclasses.replace(base, trigger_interval="2 seconds", derived_trigger_interval=None,
                               shuffle_partitions=2,
                               source=KafkaSource(topic=topic, bootstrap_servers=bootstrap, **source))  # type: ignore[arg-type]


def write_catalog(folder: Path, topic: str, bootstrap: str, **source: object) -> Path:
    """A WEIR_CONF folder whose `playback_kafka` reads `topic` (for driver subprocesses)."""
    args = ", ".join([f"topic={topic!r}", f"bootstrap_servers={bootstrap!r}",
                      *(f"{k}={v!r}" for k, v in source.items())])
    return derived_entry(folder, "playback_kafka", base="playback_kafka", trigger_interval='"2 seconds"',
                         derived_trigger_interval="None", shuffle_partitions="2",
                         source=f"KafkaSource({args})")


def driver_env(home: WeirHome, conf: Path) -> dict[str, str]:
    return {**os.environ, "WEIR_HOME": str(home.root), "WEIR_CONF": str(conf),
            "WEIR_SPARK_MASTER": "local[2]", "WEIR_SPARK_LOG_LEVEL": "ERROR",
            "PYSPARK_SUBMIT_ARGS": "--driver-memory 1g --conf spark.ui.enabled=false "
                                   "--conf spark.default.parallelism=2 pyspark-shell"}


class Driver:
    """`python -m spark_jobs.stream playback_kafka` in its own process group, logging to a file."""

    def __init__(self, home: WeirHome, conf: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = home.root / "driver.log"
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "spark_jobs.stream", "playback_kafka", *args],
                env={**driver_env(home, conf), **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=REPO_ROOT)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill9(self) -> None:
        """SIGKILL the driver and its JVM at once, as a crashed host would."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def terminate(self, timeout_s: float = 120) -> int:
        """SIGTERM: the driver stops at a batch boundary."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGTERM)  # the driver, not its JVM: it stops the queries
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(timeout=60)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def delta_row_count(table: Path) -> int:
    """Rows in the latest version of a Delta table, from the file statistics in its JSON log
    (no JVM: the test can poll a table a driver is writing without competing for the cores)."""
    live: dict[str, int] = {}
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = json.loads(action["add"]["stats"])["numRecords"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sum(live.values())


def wait_for(condition, timeout_s: float, what: str, driver: Driver | None = None,  # type: ignore[no-untyped-def]
             every_s: float = 1.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if driver is not None and not driver.alive():
            pytest.fail(f"driver exited ({driver.process.returncode}) waiting for {what}:\n{driver.tail()}")
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}"
                + (f"\n{driver.tail()}" if driver else ""))


def topic_records(conn: KafkaConnection, topic: str) -> dict[tuple[str, int, int], str]:
    """Every record the broker holds for `topic`, by (topic, partition, offset): read back with
    an independent client, this is the expected input of bronze."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_jobs.kafka import partitions

    consumer = Consumer({**conn.client_config(), "group.id": f"weir-tests-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        ends, assignment = {}, []
        for p in range(partitions(conn, topic)):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        out: dict[tuple[str, int, int], str] = {}
        deadline = time.monotonic() + 120
        while any(ends.values()) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error():
                    continue
                out[(topic, msg.partition(), msg.offset())] = msg.value().decode()
                if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                    ends[msg.partition()] = 0
        assert not any(ends.values()), f"could not read back all of {topic}"
        return out
    finally:
        consumer.close()


def recreate_topic(conn: KafkaConnection, topic: str, partition_count: int, timeout_s: float = 120) -> None:
    """Delete `topic` and create it again (a new topic id, offsets from 0), as an operator
    re-creating a topic would; waits out the broker's asynchronous deletion."""
    from confluent_kafka.admin import AdminClient

    from spark_jobs.kafka import ensure_topic, partitions
    from spark_jobs.kafka.connection import KafkaUnavailableError

    admin = AdminClient(conn.client_config())
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            partitions(conn, topic, 5)
        except KafkaUnavailableError:
            break
        assert time.monotonic() < deadline, f"topic {topic} still listed after its deletion"
        time.sleep(0.5)
    while True:
        try:
            ensure_topic(conn, topic, partition_count, 10)
            return
        except Exception:  # still marked for deletion on the controller: try again
            assert time.monotonic() < deadline, f"topic {topic} could not be created again"
            time.sleep(0.5)


def command_lines_holding(secret: str) -> list[str]:
    """The command lines of this machine's processes (what `ps` shows) that contain `secret`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if secret in text:
            found.append(text[:300])
    return found
