"""Where the ingest query starts and which topic its offsets belong to.

- Starting points: a checkpoint reset records `--from earliest|latest|TIME` beside the pipeline's
  checkpoints; the first start of the fresh checkpoint applies it, once.
- Topic identity: offsets only mean something within one incarnation of a topic. The id of the
  topic the ingest checkpoint reads is pinned beside it when the checkpoint starts; a start that
  finds another id (the topic was deleted and recreated, its offsets start again at 0) refuses
  loudly and names the reset that ingests the new topic (docs/operations.md, "Kafka topic
  deleted and recreated").
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs import topology
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.kafka.admin import TopicInfo

if TYPE_CHECKING:
    from spark_jobs.catalog import KafkaSource, Pipeline

log = logging.getLogger(__name__)
RESET_MARKER = "kafka-starting-point.json"
TOPIC_PIN = "kafka-topic.json"


class TopicRecreatedError(UserError):
    """The topic the ingest checkpoint read was deleted and recreated: the checkpoint's offsets
    do not apply to the new topic, so the stream refuses to start until its checkpoint is reset."""


def parse_timestamp_ms(text: str) -> int:
    """Epoch milliseconds from epoch milliseconds or an ISO-8601 time (naive means UTC)."""
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not earliest, latest, epoch milliseconds or an ISO-8601 time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def starting_options(reset_from: str) -> dict[str, str]:
    """Spark Kafka source options that start a fresh checkpoint at `reset_from`: `earliest`,
    `latest`, or a time (ISO-8601 or epoch ms): the first offset at or after it per partition,
    the end of a partition that has nothing newer."""
    if reset_from in ("earliest", "latest"):
        return {"startingOffsets": reset_from}
    return {"startingTimestamp": str(parse_timestamp_ms(reset_from)),
            "startingOffsetsByTimestampStrategy": "latest"}


def record_reset(home: WeirHome, pipeline: str, reset_from: str) -> Path:
    """Remember where the next fresh ingest checkpoint of `pipeline` starts (the checkpoint reset
    calls this after removing the checkpoint). Used once: the first run consumes it."""
    options = starting_options(reset_from)
    marker = home.checkpoints(pipeline) / RESET_MARKER
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"reset_from": reset_from, "options": options, "at": time.time()}))
    return marker


def starting_point(home: WeirHome, pipeline: Pipeline, source: KafkaSource) -> dict[str, str]:
    """Starting options for the ingest query: the recorded reset for a fresh checkpoint, else the
    catalog's. Spark ignores them once the checkpoint has offsets, so a marker is dropped then."""
    marker = home.checkpoints(pipeline.name) / RESET_MARKER
    started = topology.has_started(home, pipeline, "ingest")
    if marker.is_file():
        if started:
            marker.unlink()
        else:
            recorded = json.loads(marker.read_text())
            log.info("%s starts its fresh checkpoint from %s (checkpoint reset)",
                     pipeline.name, recorded["reset_from"])
            return dict(recorded["options"])
    return {"startingOffsets": source.starting_offsets}


def check_topic(home: WeirHome, pipeline: Pipeline, topic: TopicInfo) -> None:
    """Pin `topic`'s id for a fresh ingest checkpoint; for one that has started, refuse a topic
    whose id is not the pinned one (`TopicRecreatedError`). A started checkpoint without a pin
    (written before pins existed) or pinned to another topic name (the catalog changed topic,
    which the compatibility check judges) adopts the current id."""
    pin = home.checkpoints(pipeline.name) / TOPIC_PIN
    pinned: dict[str, str] = {}
    if pin.is_file():
        try:
            pinned = dict(json.loads(pin.read_text(encoding="utf-8")))
        except ValueError:
            log.warning("%s: unreadable %s, pinning the current topic id again", pipeline.name, pin)
    started = topology.has_started(home, pipeline, "ingest")
    if started and pinned.get("topic") == topic.name and pinned.get("topic_id") != topic.topic_id:
        command = f"weir checkpoint reset {pipeline.name} --from earliest --yes"
        log.error("%s: Kafka topic %s was deleted and recreated (id %s, now %s); the ingest "
                  "checkpoint's offsets do not apply to it. Run `%s` to ingest the new topic",
                  pipeline.name, topic.name, pinned.get("topic_id"), topic.topic_id, command)
        raise TopicRecreatedError(
            f"Kafka topic {topic.name!r} was deleted and recreated (id {pinned.get('topic_id')}, "
            f"now {topic.topic_id}): {pipeline.name}'s ingest checkpoint belongs to the old topic "
            f"and nothing of the new one was read; run `{command}` to ingest the new topic from "
            "its start (its records are not taken for the old ones)")
    if pinned.get("topic") == topic.name and pinned.get("topic_id") == topic.topic_id:
        return
    if started:
        log.warning("%s: ingest checkpoint has no pinned id for Kafka topic %s: pinning %s",
                    pipeline.name, topic.name, topic.topic_id)
    pin.parent.mkdir(parents=True, exist_ok=True)
    pin.write_text(json.dumps({"topic": topic.name, "topic_id": topic.topic_id, "at": time.time()}),
                   encoding="utf-8")
