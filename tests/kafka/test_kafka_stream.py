"""Exactly once from a real Kafka broker through bronze, silver and quarantine, through a kill -9
of the driver, a broker restart, lost offsets and a reset to a timestamp. Every expected set is
read back from the broker with an independent client, stated before the stream runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spark_jobs import kafka, stream
from spark_jobs.control.progress import kafka_lag
from spark_jobs.generator import BAD_LINES, Written, generate
from spark_jobs.home import WeirHome
from spark_jobs.kafka import KafkaConnection
from tests.helpers import assert_exactly_once, table
from tests.kafka.harness import (
    BROKER,
    Broker,
    Driver,
    command_lines_holding,
    delta_row_count,
    driver_env,
    kafka_pipeline,
    recreate_topic,
    topic_records,
    wait_for,
    write_catalog,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(1800)]
PIPELINE = "playback_kafka"
BATCH = 20   # offsets per trigger (of the three partitions together)


def assert_layers_exact(spark, home: WeirHome, records: dict[tuple[str, int, int], str],  # type: ignore[no-untyped-def]
                        event_ids: set[str], conn: KafkaConnection) -> None:
    """Bronze holds every broker record once, silver every valid event once, quarantine every
    bad record once (by its identity: topic, partition and topic id, offset)."""
    pipeline = kafka_pipeline("unused", "unused")
    bronze = table(spark, home.table("bronze", pipeline.events_table))
    assert_exactly_once(bronze, ("topic", "partition", "offset"), set(records), "bronze")
    assert_exactly_once(table(spark, home.table("silver", pipeline.events_table)), ("event_id",),
                        event_ids, "silver")
    ids = {t: kafka.describe_topic(conn, t).topic_id for t, _, _ in records}
    bad = {(kafka.record_source(t, p, ids[t]), o) for (t, p, o), value in records.items()
           if value in BAD_LINES}
    assert_exactly_once(table(spark, home.table("quarantine", pipeline.events_table)),
                        ("source", "position"), bad, "quarantine")


def produce_files(broker: Broker, topic: str, written: Written) -> None:
    for path in written.files:
        kafka.produce_lines(broker.connection, topic, kafka.landing_lines(path))


def test_sigterm_then_kill9_mid_backlog_then_restart_every_offset_once(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    written = generate(tmp_path / "feed", files=2, sessions_per_file=8, seed=11)
    conf = write_catalog(tmp_path / "conf", topic, broker.bootstrap, max_offsets_per_trigger=BATCH)
    # A secret in the environment, as a deploy passes one: the Java client takes it (unused on
    # PLAINTEXT); it must never reach a command line or a log.
    secret = {"WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD": f"canary-{uuid.uuid4().hex}"}
    produced = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "produce", PIPELINE, "--from", str(tmp_path / "feed"),
         "--json"], env={**driver_env(home, conf), **secret}, capture_output=True, text=True, timeout=300)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["records"] == written.lines
    records = topic_records(broker.connection, topic)
    assert len(records) == written.lines and written.bad_lines and written.duplicate_lines

    bronze = home.table("bronze", "playback_kafka_events")
    # A SIGTERM does not wait for the backlog: the batch in flight commits, and the one Kafka's
    # source planned meanwhile is interrupted (the restart replays it).
    driver = Driver(home, conf, env=secret)
    try:
        wait_for(lambda: delta_row_count(bronze) > 0, 900, "the first bronze batch", driver)
        assert command_lines_holding(secret["WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD"]) == []
    finally:
        assert driver.terminate() == 0, driver.tail()
    assert "stopped (at a batch boundary)" in driver.tail(400), driver.tail()
    stopped_at = delta_row_count(bronze)
    assert stopped_at <= 3 * BATCH < len(records), f"the stop waited for the backlog: {stopped_at} records"

    driver = Driver(home, conf, env=secret)
    try:
        wait_for(lambda: delta_row_count(bronze) > stopped_at, 900, "a bronze batch after the stop", driver)
        time.sleep(random.uniform(0, 3))  # then mid-way through a later batch
    finally:
        driver.kill9()
    leaked = [str(p) for p in home.root.rglob("*") if p.is_file() and p.suffix != ".parquet"
              and secret["WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD"].encode() in p.read_bytes()]
    assert leaked == [], f"the secret was written to {leaked}"
    ingested = delta_row_count(bronze)
    assert ingested < len(records), "the kill came after the whole topic was ingested"

    progress: list[dict] = []
    listener = ProgressRecorder(progress)
    spark.streams.addListener(listener)
    try:
        stream.run(kafka_pipeline(topic, broker.bootstrap, max_offsets_per_trigger=BATCH), once=True,
                   home=home, spark=spark)
    finally:
        time.sleep(1)  # listener events are delivered asynchronously
        spark.streams.removeListener(listener)
    assert_layers_exact(spark, home, records, written.event_ids, broker.connection)

    # A batch replayed from the offset log reports no latest offset, hence no lag; every other
    # batch reports all three partitions, the bounded batches a backlog, the last one none.
    lags = [kafka_lag([s])[1] for p in progress for s in p["sources"]
            if str(s.get("description", "")).startswith("KafkaV2") and s.get("latestOffset")]
    assert lags, "no Kafka progress with a latest offset was reported"
    assert all(lag.keys() == {f"{topic}-{p}" for p in range(3)} for lag in lags), lags
    assert sum(lags[-1].values()) == 0, f"lag after the last batch: {lags[-1]}"
    # Progress counts Kafka records, each batch bounded by maxOffsetsPerTrigger (issue 11).
    rows = [s["numInputRows"] for p in progress for s in p["sources"]
            if str(s.get("description", "")).startswith("KafkaV2")]
    assert max(rows) <= 60 and sum(rows) >= len(records) - ingested, rows


def test_a_batch_is_read_by_tasks_of_at_most_the_catalogs_records_per_partition(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    """Spark reads a topic with one task per partition unless told otherwise. The catalog's bound
    on one task's records reaches the reader: a misspelt option would be ignored without a word."""
    kafka.ensure_topic(broker.connection, topic, 3)
    written = generate(tmp_path / "feed", files=1, sessions_per_file=12, seed=5)
    produce_files(broker, topic, written)
    records = topic_records(broker.connection, topic)
    counts = [sum(1 for _, p, _ in records if p == q) for q in range(3)]
    pipeline = kafka_pipeline(topic, broker.bootstrap, max_records_per_partition=10)
    options = kafka.source_options(home, pipeline, pipeline.source, broker.connection)  # type: ignore[arg-type]
    tasks: list[int] = []
    query = (spark.readStream.format("kafka").options(**options).load().writeStream
             .foreachBatch(lambda batch, _: tasks.append(batch.rdd.getNumPartitions()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    assert len(records) == written.lines and max(counts) > 10, counts
    assert tasks == [sum(-(-n // 10) for n in counts)], (tasks, counts)   # ceil(n / 10) each


class ProgressRecorder:
    """A StreamingQueryListener keeping every progress as parsed JSON."""

    def __new__(cls, sink: list[dict]):  # type: ignore[no-untyped-def]
        from pyspark.sql.streaming import StreamingQueryListener

        class Recorder(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryProgress(self, event) -> None:  # type: ignore[no-untyped-def]
                sink.append(json.loads(event.progress.json))

            def onQueryIdle(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

            def onQueryTerminated(self, event) -> None:  # type: ignore[no-untyped-def]
                pass

        return Recorder()


def test_broker_restart_while_streaming_recovers_losing_and_doubling_nothing(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    first = generate(tmp_path / "a", files=2, sessions_per_file=6, seed=21, prefix="a")
    second = generate(tmp_path / "b", files=2, sessions_per_file=6, seed=22, prefix="b")
    kafka.ensure_topic(broker.connection, topic, 3)
    produce_files(broker, topic, first)
    conf = write_catalog(tmp_path / "conf", topic, broker.bootstrap, max_offsets_per_trigger=50)
    bronze = home.table("bronze", "playback_kafka_events")
    driver = Driver(home, conf)
    try:
        wait_for(lambda: delta_row_count(bronze) > 0, 900, "the first bronze batch", driver)
        broker.stop()
        time.sleep(3)
        broker.start()
        produce_files(broker, topic, second)
        records = topic_records(broker.connection, topic)
        assert len(records) == first.lines + second.lines
        events = first.event_ids | second.event_ids
        silver = home.table("silver", "playback_kafka_events")
        wait_for(lambda: delta_row_count(bronze) >= len(records) and delta_row_count(silver) >= len(events),
                 900, "the stream to ingest both halves", driver, every_s=5)
        assert driver.alive(), "the driver died instead of riding out the broker restart"
    finally:
        code = driver.terminate()
    assert code == 0, driver.tail()
    assert_layers_exact(spark, home, records, events, broker.connection)


def test_a_kept_port_held_by_another_process_is_refused_naming_it(broker: Broker) -> None:
    """The broker keeps its listener port across restarts, for its clients. Held by another
    process, the start is refused in one line naming the port and the holder, before any JVM starts.
    The controller port, which only the broker uses, is drawn anew when held; the broker then
    starts on its data with its clients' port."""
    state_file = broker.home.kafka / "broker.json"
    before = json.loads(state_file.read_text())
    broker.stop()
    held = {}
    try:
        for name in ("port", "controller_port"):
            held[name] = socket.socket()
            held[name].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held[name].bind(("127.0.0.1", before[name]))
            held[name].listen()
        refused = subprocess.run([sys.executable, str(BROKER), "start"], capture_output=True, text=True,
                                 env={**os.environ, "WEIR_HOME": str(broker.home.root)}, timeout=120)
        assert refused.returncode == 1, refused
        [message] = refused.stderr.strip().splitlines()
        assert f"port {before['port']} " in message and f"pid {os.getpid()} " in message, message
        assert json.loads(state_file.read_text())["pid"] == before["pid"], "a broker was started"
        held.pop("port").close()
        broker.start()   # the controller port still held
        after = json.loads(state_file.read_text())
        assert (after["port"], after["cluster_id"]) == (before["port"], before["cluster_id"]), after
        assert after["controller_port"] != before["controller_port"], after
    finally:
        for sock in held.values():
            sock.close()
        broker.start()
    kafka.ensure_topic(broker.connection, f"weir-test-{uuid.uuid4().hex[:8]}", 1)  # it answers


def test_unreachable_broker_or_missing_topic_fails_the_start_clearly(
        spark, home: WeirHome, broker: Broker, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.sources import read_stream

    monkeypatch.setenv("WEIR_KAFKA_PREFLIGHT_TIMEOUT_S", "5")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    with pytest.raises(kafka.KafkaUnavailableError, match=f"brokers at {closed} did not answer"):
        read_stream(spark, kafka_pipeline(topic, closed), home)
    assert time.monotonic() - started < 30
    with pytest.raises(kafka.KafkaUnavailableError, match=f"topic '{topic}' does not exist"):
        read_stream(spark, kafka_pipeline(topic, broker.bootstrap), home)


def test_offsets_gone_fail_loudly_unless_the_pipeline_opts_in(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    conn = broker.connection
    kafka.ensure_topic(conn, topic, 1)
    before = generate(tmp_path / "a", files=1, sessions_per_file=2, seed=31, prefix="a", bad_ratio=0)
    produce_files(broker, topic, before)
    pipeline = kafka_pipeline(topic, broker.bootstrap)
    stream.run(pipeline, once=True, home=home, spark=spark)
    seen = topic_records(conn, topic)

    after = generate(tmp_path / "b", files=1, sessions_per_file=2, seed=32, prefix="b", bad_ratio=0)
    produce_files(broker, topic, after)
    end = len(seen) + after.lines
    cut = len(seen) + after.lines // 2  # retention removes the first half of the new records
    admin = AdminClient(conn.client_config())
    admin.delete_records([TopicPartition(topic, 0, cut)])[TopicPartition(topic, 0, cut)].result(30)
    survivors = topic_records(conn, topic)
    assert set(survivors) == {(topic, 0, o) for o in range(cut, end)}

    from pyspark.errors import StreamingQueryException

    with pytest.raises((stream.StreamFailedError, StreamingQueryException), match="failOnDataLoss"):
        stream.run(pipeline, once=True, home=home, spark=spark)
    bronze = table(spark, home.table("bronze", pipeline.events_table))
    assert_exactly_once(bronze, ("topic", "partition", "offset"), set(seen), "bronze after the failure")

    opted_in = dataclasses.replace(
        pipeline, source=dataclasses.replace(pipeline.source, fail_on_data_loss=False))
    stream.run(opted_in, once=True, home=home, spark=spark)
    assert_exactly_once(bronze, ("topic", "partition", "offset"), set(seen) | set(survivors),
                        "bronze after skipping the lost offsets")


def test_reset_to_a_timestamp_starts_a_fresh_checkpoint_there(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    conn = broker.connection
    kafka.ensure_topic(conn, topic, 2)
    old = generate(tmp_path / "a", files=1, sessions_per_file=2, seed=41, prefix="a", bad_ratio=0)
    produce_files(broker, topic, old)
    old_records = topic_records(conn, topic)
    time.sleep(1.5)
    reset_at = dt.datetime.now(dt.UTC).isoformat()
    time.sleep(1.5)
    new = generate(tmp_path / "b", files=1, sessions_per_file=2, seed=42, prefix="b", bad_ratio=0,
                   dup_ratio=0)
    produce_files(broker, topic, new)
    new_records = {k: v for k, v in topic_records(conn, topic).items() if k not in old_records}

    pipeline = kafka_pipeline(topic, broker.bootstrap)
    kafka.record_reset(home, pipeline.name, reset_at)
    stream.run(pipeline, once=True, home=home, spark=spark)
    bronze = table(spark, home.table("bronze", pipeline.events_table))
    assert_exactly_once(bronze, ("topic", "partition", "offset"), set(new_records), "bronze")
    assert_exactly_once(table(spark, home.table("silver", pipeline.events_table)), ("event_id",),
                        new.event_ids, "silver")
    # The checkpoint now has offsets: the reset is used up and the catalog's start applies again.
    assert kafka.starting_point(home, pipeline, pipeline.source) == {"startingOffsets": "earliest"}
    assert not (home.checkpoints(pipeline.name) / kafka.RESET_MARKER).exists()


def test_recreated_topic_refuses_to_start_and_a_reset_ingests_its_records_as_new(
        spark, home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    """Issue 12, scenario 9: a topic deleted and recreated restarts its offsets at 0; its records
    must not be taken for the old topic's records at the same offsets."""
    conn = broker.connection
    kafka.ensure_topic(conn, topic, 2)
    old = generate(tmp_path / "a", files=1, sessions_per_file=4, seed=51, prefix="a", bad_ratio=0.1)
    produce_files(broker, topic, old)
    old_records = topic_records(conn, topic)
    old_id = kafka.describe_topic(conn, topic).topic_id
    pipeline = kafka_pipeline(topic, broker.bootstrap)
    stream.run(pipeline, once=True, home=home, spark=spark)

    recreate_topic(conn, topic, 2)
    new = generate(tmp_path / "b", files=1, sessions_per_file=2, seed=53, prefix="b", bad_ratio=0.1)
    produce_files(broker, topic, new)
    new_records = topic_records(conn, topic)
    new_id = kafka.describe_topic(conn, topic).topic_id
    assert new_id != old_id
    assert set(new_records) & set(old_records), "the new offsets must overlap the old ones"
    assert old.bad_lines and new.bad_lines and old.event_ids.isdisjoint(new.event_ids)

    # The old checkpoint's offsets mean nothing on the new topic: the start refuses, loudly.
    command = f"weir checkpoint reset {pipeline.name} --from earliest --yes"
    with pytest.raises(kafka.TopicRecreatedError, match=re.escape(command)):
        stream.run(pipeline, once=True, home=home, spark=spark)
    assert table(spark, home.table("bronze", pipeline.events_table)).count() == len(old_records)

    # The documented way out, as on-call runs it.
    conf = write_catalog(tmp_path / "conf", topic, broker.bootstrap)
    reset = subprocess.run([sys.executable, "-m", "spark_jobs.cli", *command.split()[1:]],
                           env=driver_env(home, conf), capture_output=True, text=True, timeout=300)
    assert reset.returncode == 0, reset.stderr
    stream.run(pipeline, once=True, home=home, spark=spark)

    def identities(records: dict[tuple[str, int, int], str], topic_id: str,
                   bad: bool = False) -> set[tuple[str, int]]:
        return {(kafka.record_source(t, p, topic_id), o) for (t, p, o), value in records.items()
                if not bad or value in BAD_LINES}

    expected = identities(old_records, old_id) | identities(new_records, new_id)
    assert len(expected) == len(old_records) + len(new_records)
    assert_exactly_once(table(spark, home.table("bronze", pipeline.events_table)),
                        ("source", "position"), expected, "bronze")
    assert_exactly_once(table(spark, home.table("silver", pipeline.events_table)), ("event_id",),
                        old.event_ids | new.event_ids, "silver")
    assert_exactly_once(table(spark, home.table("quarantine", pipeline.events_table)),
                        ("source", "position"),
                        identities(old_records, old_id, True) | identities(new_records, new_id, True),
                        "quarantine")


def test_running_stream_stops_loudly_when_its_topic_is_recreated(
        home: WeirHome, broker: Broker, topic: str, tmp_path: Path) -> None:
    """A running driver whose topic is deleted and recreated fails (Spark's failOnDataLoss: the
    offsets went backwards); its restart refuses with the reset to run, reading nothing."""
    conn = broker.connection
    kafka.ensure_topic(conn, topic, 2)
    old = generate(tmp_path / "a", files=1, sessions_per_file=4, seed=61, prefix="a", bad_ratio=0)
    produce_files(broker, topic, old)
    conf = write_catalog(tmp_path / "conf", topic, broker.bootstrap)
    bronze = home.table("bronze", "playback_kafka_events")
    driver = Driver(home, conf)
    try:
        wait_for(lambda: delta_row_count(bronze) >= old.lines, 900, "the old topic ingested", driver)
        recreate_topic(conn, topic, 2)
        new = generate(tmp_path / "b", files=1, sessions_per_file=1, seed=62, prefix="b", bad_ratio=0)
        produce_files(broker, topic, new)
        wait_for(lambda: not driver.alive(), 300, "the driver to fail on the recreated topic")
    finally:
        code = driver.terminate()
    assert code != 0, driver.tail()
    assert "failOnDataLoss" in driver.log.read_text(errors="replace"), driver.tail()

    restarted = Driver(home, conf)
    try:
        wait_for(lambda: not restarted.alive(), 600, "the restarted driver to refuse")
    finally:
        code = restarted.terminate()
    assert code != 0
    assert (f"run `weir checkpoint reset {PIPELINE} --from earliest --yes`"
            in restarted.log.read_text(errors="replace")), restarted.tail()
    assert delta_row_count(bronze) == old.lines
