"""The options of Spark's Kafka source for a pipeline, and the identity a record gets in bronze.

A record is `(source, position)` = (`kafka://<topic>/<partition>@<topic id>`, offset): the topic
id (a UUID Kafka gives a topic when it is created) keeps the records of a recreated topic, whose
offsets start again at 0, apart from those of the topic it replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.kafka.connection import KafkaConnection
from spark_jobs.kafka.offsets import starting_point

if TYPE_CHECKING:
    from spark_jobs.catalog import KafkaSource, Pipeline
    from spark_jobs.home import WeirHome


def record_source(topic: str, partition: int, topic_id: str) -> str:
    """The bronze `source` of the records of one partition of one incarnation of a topic."""
    return f"kafka://{topic}/{partition}@{topic_id}"


def source_options(home: WeirHome, pipeline: Pipeline, source: KafkaSource,
                   conn: KafkaConnection) -> dict[str, str]:
    """Every option of the Spark Kafka source of `pipeline` (secrets included: never log this,
    and hand it to the reader in-process only)."""
    options = {
        **conn.spark_options(),
        "subscribe": source.topic,
        "failOnDataLoss": str(source.fail_on_data_loss).lower(),
        "groupIdPrefix": f"weir-{pipeline.name}",
        **starting_point(home, pipeline, source),
    }
    if source.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    if source.max_records_per_partition:
        options["maxRecordsPerPartition"] = str(source.max_records_per_partition)
    return options
