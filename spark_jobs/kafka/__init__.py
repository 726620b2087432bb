"""Kafka for Weir pipelines, one module per concern:

- `connection`: brokers and security from an Airflow connection or the environment, never shown;
- `admin`: the start's preflight, a topic's id and partitions, creating a topic;
- `producer`: publishing landing-style lines (`weir produce`);
- `offsets`: where a fresh ingest checkpoint starts, and the topic incarnation a checkpoint reads;
- `spark_source`: the Spark source's options and a record's bronze identity.
Lag per partition is read from a query's progress (`spark_jobs.control.progress.kafka_lag`).
"""

from __future__ import annotations

from spark_jobs.kafka.admin import TopicInfo, describe_topic, ensure_topic, partitions
from spark_jobs.kafka.connection import KafkaConnection, KafkaUnavailableError, connection
from spark_jobs.kafka.offsets import (
    RESET_MARKER,
    TOPIC_PIN,
    TopicRecreatedError,
    check_topic,
    record_reset,
    starting_options,
    starting_point,
)
from spark_jobs.kafka.producer import Produced, landing_lines, produce_lines
from spark_jobs.kafka.spark_source import record_source, source_options

__all__ = [
    "RESET_MARKER", "TOPIC_PIN", "KafkaConnection", "KafkaUnavailableError", "Produced",
    "TopicInfo", "TopicRecreatedError", "check_topic", "connection", "describe_topic",
    "ensure_topic", "landing_lines", "partitions", "produce_lines", "record_reset",
    "record_source", "source_options", "starting_options", "starting_point",
]
