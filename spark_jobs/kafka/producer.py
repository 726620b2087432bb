"""Publishing to a topic (`weir produce`, tests, benchmarks): one record per landing-style line,
idempotent producer so a broker retry never doubles a record."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_jobs.kafka.connection import KafkaConnection, KafkaUnavailableError

log = logging.getLogger(__name__)


@dataclass
class Produced:
    """What a produce run delivered: counts, and every record's (partition, offset)."""

    messages: int = 0
    bytes: int = 0
    positions: list[tuple[int, int]] = field(default_factory=list)


def _session_key(line: str) -> bytes | None:
    """The session id as the record key, so a viewing session stays ordered in one partition;
    lines that are not JSON objects go without a key."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    key = value.get("session_id") if isinstance(value, dict) else None
    return str(key).encode() if key is not None else None


def produce_lines(conn: KafkaConnection, topic: str, lines: Iterable[str], *,
                  on_delivered: Callable[[int], None] | None = None,
                  flush_timeout_s: float = 120.0) -> Produced:
    """Publish each line as one record (idempotent producer, acks=all, so broker retries never
    double a record). Raises when any record was not delivered."""
    from confluent_kafka import Producer

    producer = Producer({**conn.client_config(), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "compression.type": "lz4", "logger": log})
    produced = Produced()
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
            return
        produced.messages += 1
        produced.positions.append((msg.partition(), msg.offset()))
        if on_delivered:
            on_delivered(1)

    for line in lines:
        value = line.encode()
        while True:
            try:
                producer.produce(topic, value=value, key=_session_key(line), on_delivery=delivered)
                break
            except BufferError:  # local queue full: wait for deliveries to drain it
                producer.poll(0.5)
        produced.bytes += len(value)
        producer.poll(0)
    remaining = producer.flush(flush_timeout_s)
    if failures or remaining:
        raise KafkaUnavailableError(
            f"{len(failures) + remaining} record(s) not delivered to {topic} on {conn.bootstrap_servers}"
            + (f": {failures[0]}" if failures else f" within {flush_timeout_s:.0f}s"))
    return produced


def landing_lines(path: Path) -> Iterable[str]:
    """The lines of one landing-style JSON-lines file, without line ends; blank lines dropped."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\r\n")
            if line:
                yield line
