"""The reference pipeline `playback` reading Kafka instead of the landing folder: the same event
contract, transforms and gold aggregation, in tables of its own. `weir produce playback_kafka
--from DIR` publishes landing-style files to its topic; `local` is the development broker of
`infra/kafka` (set WEIR_KAFKA_BOOTSTRAP_SERVERS or a connection for a real cluster)."""

import dataclasses
import importlib.util
from pathlib import Path

from spark_jobs.catalog import KafkaSource

_spec = importlib.util.spec_from_file_location("weir_catalog_playback",
                                               Path(__file__).with_name("playback.py"))
assert _spec is not None and _spec.loader is not None
_playback = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_playback)
_base = _playback.PIPELINE

PIPELINE = dataclasses.replace(
    _base,
    name="playback_kafka",
    description="Player events from Kafka → QoE metrics per minute, content and CDN",
    events_table="playback_kafka_events",
    aggregation=dataclasses.replace(_base.aggregation, table="playback_kafka_qoe_1m"),
    sessions=dataclasses.replace(_base.sessions, table="playback_kafka_sessions"),
    # Micro-batches of the catalog's default bound (500k records): a backlog is taken in batches
    # large enough that a batch's fixed cost (its commits, the dedupe lookups) stays small beside it.
    source=KafkaSource(topic="playback", bootstrap_servers="local", starting_offsets="earliest",
                       partitions=3),
)
