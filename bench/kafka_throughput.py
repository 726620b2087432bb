"""The Kafka side of the harness: a local broker holding the dataset's lines on a topic.

`python -m bench.run --only kafka` starts a broker of `infra/kafka` under the run's work folder,
publishes every line of the base dataset to the `playback_kafka` entry's topic (idempotent
producer, as `weir produce`; the broker's end offsets must add up to the lines), then runs two
measured jobs side by side on those same records, each in its own worker process
(`bench.workloads`):

- `bare_kafka`: a hand-written `readStream.format("kafka") → from_json → Delta append`,
  `availableNow`, as many offsets per micro-batch as the catalog entry takes;
- `platform_kafka`: `weir run playback_kafka --once`, the entry as deployed (bronze, quarantine,
  silver, gold), only its bootstrap servers given by `WEIR_KAFKA_BOOTSTRAP_SERVERS`.

The broker is stopped and its data removed afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.home import REPO_ROOT

if TYPE_CHECKING:
    from bench.datasets import Dataset

log = logging.getLogger("bench.kafka_throughput")
BROKER = REPO_ROOT / "infra" / "kafka" / "broker.py"
PARTITIONS = 3


class Broker:
    """The local broker of `infra/kafka` under its own WEIR_HOME, driven through its CLI."""

    def __init__(self, root: Path) -> None:
        self.env = {**os.environ, "WEIR_HOME": str(root)}
        self.env.pop("WEIR_KAFKA_PORT", None)          # a free port: never someone else's broker
        self.bootstrap = ""

    def _run(self, *args: str, timeout_s: float = 300) -> str:
        done = subprocess.run([sys.executable, str(BROKER), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"broker {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout

    def start(self) -> str:
        self._run("install", timeout_s=600)
        state = json.loads(self._run("start", "--json").strip().splitlines()[-1])
        self.bootstrap = str(state["bootstrap_servers"])
        return self.bootstrap

    def stop(self) -> None:
        subprocess.run([sys.executable, str(BROKER), "stop"], env=self.env, capture_output=True,
                       timeout=120, check=False)


def publish(bootstrap: str, topic: str, dataset: Dataset) -> dict[str, Any]:
    """Publish every line of the dataset to a fresh `topic` (idempotent producer, as `weir
    produce`); the broker's end offsets must add up to the dataset's lines."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_jobs import kafka

    conn = kafka.KafkaConnection(bootstrap)
    kafka.ensure_topic(conn, topic, PARTITIONS)
    started = time.monotonic()
    records = 0
    for path in sorted(Path(dataset.path).iterdir()):
        records += kafka.produce_lines(conn, topic, kafka.landing_lines(path)).messages
    seconds = time.monotonic() - started
    consumer = Consumer({**conn.client_config(), "group.id": f"weir-bench-{os.getpid()}"})
    try:
        held = sum(high - low for low, high in (
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(PARTITIONS)))
    finally:
        consumer.close()
    if records != dataset.lines or held != dataset.lines:
        raise RuntimeError(f"{topic}: {records} records delivered, {held} held, "
                           f"{dataset.lines} lines expected")
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds, 1)}


@contextmanager
def topic_holding(data: Dataset, root: Path, topic: str) -> Iterator[dict[str, Any]]:
    """A broker under `root` whose `topic` holds every line of `data`: its bootstrap servers and
    what publishing took. The broker is stopped and `root` removed on exit."""
    broker = Broker(root)
    try:
        bootstrap = broker.start()
        produced = publish(bootstrap, topic, data)
        log.info("%s: %d records published in %.1fs", topic, produced["records"], produced["seconds"])
        yield {"bootstrap": bootstrap, "topic": topic, "partitions": PARTITIONS, "produce": produced}
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
