"""Topic administration: the preflight a start runs (brokers answer, topic exists), a topic's
identity (its id tells a recreated topic from the one it replaced), and creating a topic."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from spark_jobs.kafka.connection import KafkaConnection, KafkaUnavailableError
from spark_jobs.settings import settings

log = logging.getLogger(__name__)


def preflight_timeout_s() -> float:
    """How long a start waits for the brokers to answer before it fails."""
    return settings().kafka_preflight_timeout_s


@dataclass(frozen=True)
class TopicInfo:
    """What a start needs to know of its topic: how many partitions, and which incarnation
    (Kafka gives every topic a UUID at creation; a deleted and recreated topic gets a new one)."""

    name: str
    topic_id: str
    partitions: int


def _admin(conn: KafkaConnection, timeout_s: float) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({**conn.client_config(), "socket.timeout.ms": int(timeout_s * 1000),
                        "logger": log})


def partitions(conn: KafkaConnection, topic: str, timeout_s: float | None = None) -> int:
    """The number of partitions of `topic`; a clear error when the brokers do not answer within
    `timeout_s` (default `WEIR_KAFKA_PREFLIGHT_TIMEOUT_S`, 20) or the topic does not exist."""
    from confluent_kafka import KafkaException

    timeout_s = timeout_s or preflight_timeout_s()
    try:
        metadata = _admin(conn, timeout_s).list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as err:
        raise KafkaUnavailableError(
            f"Kafka brokers at {conn.bootstrap_servers} did not answer within {timeout_s:.0f}s "
            f"({err.args[0].str() if err.args else err})") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise KafkaUnavailableError(f"Kafka topic {topic!r} does not exist on {conn.bootstrap_servers}")
    return len(found.partitions)


def describe_topic(conn: KafkaConnection, topic: str, timeout_s: float | None = None) -> TopicInfo:
    """Partitions and id of `topic`, after the preflight of `partitions` (same clear errors)."""
    from confluent_kafka import KafkaException, TopicCollection

    timeout_s = timeout_s or preflight_timeout_s()
    count = partitions(conn, topic, timeout_s)
    admin = _admin(conn, timeout_s)  # kept referenced until the result: its handle serves the future
    try:
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
        topic_id = str(described.result(timeout=timeout_s).topic_id)
    except KafkaException as err:
        raise KafkaUnavailableError(
            f"Kafka topic {topic!r} on {conn.bootstrap_servers} could not be described "
            f"({err.args[0].str() if err.args else err})") from None
    return TopicInfo(topic, topic_id, count)


def ensure_topic(conn: KafkaConnection, topic: str, partition_count: int,
                 timeout_s: float | None = None) -> bool:
    """Create `topic` with `partition_count` partitions unless it exists; returns whether it was
    created. Replication is the cluster's default."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    timeout_s = timeout_s or preflight_timeout_s()
    try:
        partitions(conn, topic, timeout_s)
        return False
    except KafkaUnavailableError as err:
        if "does not exist" not in str(err):
            raise
    admin = _admin(conn, timeout_s)  # kept referenced until the result: its handle serves the future
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partition_count)], operation_timeout=timeout_s)[topic]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as err:
        if err.args and err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    log.info("created Kafka topic %s with %d partitions on %s", topic, partition_count,
             conn.bootstrap_servers)
    return True
