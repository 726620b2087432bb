"""Kafka settings without a broker: security from the environment or an Airflow connection and
never shown, starting points for resets, the pinned topic id, lag per partition from a progress."""

from __future__ import annotations

import json
import logging

import pytest

from spark_jobs import kafka
from spark_jobs.catalog import KafkaSource
from spark_jobs.control.progress import kafka_lag
from spark_jobs.home import WeirHome

pytestmark = pytest.mark.kafka
SOURCE = KafkaSource(topic="playback", bootstrap_servers="catalog:9092")


def test_environment_security_reaches_spark_and_the_producer_but_never_a_log(
        caplog: pytest.LogCaptureFixture) -> None:
    env = {"WEIR_KAFKA_BOOTSTRAP_SERVERS": "k1:9093,k2:9093", "WEIR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "WEIR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "WEIR_KAFKA_SASL_USERNAME": "weir",
           "WEIR_KAFKA_SASL_PASSWORD": "s3cr3t-pw", "WEIR_KAFKA_SSL_CA_LOCATION": "/etc/ca.pem"}
    conn = kafka.connection(SOURCE, env=env)
    options = conn.spark_options()
    assert options["kafka.bootstrap.servers"] == "k1:9093,k2:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="weir" password="s3cr3t-pw";')
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    client = conn.client_config()
    assert client["sasl.password"] == "s3cr3t-pw" and client["ssl.ca.location"] == "/etc/ca.pem"
    assert "sasl.jaas.config" not in client
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("connecting with %s / %r", conn.describe(), conn)
    assert "s3cr3t-pw" not in caplog.text and "s3cr3t-pw" not in repr(conn) + str(conn)
    assert "sasl.password=***" in caplog.text


def test_airflow_connection_json_and_uri_give_servers_and_credentials() -> None:
    as_json = json.dumps({"conn_type": "kafka", "host": "broker.prod", "port": 9094, "login": "svc",
                          "password": "pw", "extra": {"security.protocol": "SASL_SSL",
                                                      "sasl.mechanism": "PLAIN", "unrelated": "x"}})
    conn = kafka.connection(KafkaSource(topic="t", connection="kafka_prod"),
                            env={"AIRFLOW_CONN_KAFKA_PROD": as_json})
    assert conn.bootstrap_servers == "broker.prod:9094"
    assert conn.settings == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                             "sasl.username": "svc", "sasl.password": "pw"}
    assert "PlainLoginModule required username=\"svc\"" in conn.java_properties()["sasl.jaas.config"]

    uri = "kafka://svc:p%40ss@broker.prod:9094/?security.protocol=SASL_PLAINTEXT&sasl.mechanism=PLAIN"
    env = {"AIRFLOW_CONN_KAFKA_PROD": uri, "WEIR_KAFKA_CONNECTION": "kafka_prod",
           "WEIR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"}  # the environment wins over the connection
    conn = kafka.connection(SOURCE, env=env)
    assert conn.bootstrap_servers == "broker.prod:9094"
    assert conn.settings["sasl.password"] == "p@ss"
    assert conn.settings["sasl.mechanism"] == "SCRAM-SHA-256"


def test_catalog_servers_apply_without_overrides_and_local_means_the_dev_broker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert kafka.connection(SOURCE, env={}).spark_options() == {"kafka.bootstrap.servers": "catalog:9092"}
    home = WeirHome(tmp_path)
    local = KafkaSource(topic="t", bootstrap_servers="local")
    with pytest.raises(kafka.KafkaUnavailableError, match=r"broker\.sh start"):
        kafka.connection(local, home=home, env={})
    home.kafka.mkdir(parents=True)
    (home.kafka / "broker.json").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:40001"}))
    assert kafka.connection(local, home=home, env={}).bootstrap_servers == "127.0.0.1:40001"


@pytest.mark.parametrize(("reset_from", "options"), [
    ("earliest", {"startingOffsets": "earliest"}),
    ("latest", {"startingOffsets": "latest"}),
    ("2026-11-20T10:00:00Z", {"startingTimestamp": "1795168800000",
                              "startingOffsetsByTimestampStrategy": "latest"}),
    ("2026-11-20T11:00:00+01:00", {"startingTimestamp": "1795168800000",
                                   "startingOffsetsByTimestampStrategy": "latest"}),
    ("1795168800000", {"startingTimestamp": "1795168800000",
                       "startingOffsetsByTimestampStrategy": "latest"}),
])
def test_starting_options_for_earliest_latest_and_a_time(reset_from: str, options: dict) -> None:
    assert kafka.starting_options(reset_from) == options


def test_a_reset_that_is_not_a_time_is_refused() -> None:
    with pytest.raises(ValueError, match="not earliest, latest"):
        kafka.starting_options("yesterday")


def test_lag_is_latest_minus_processed_per_partition() -> None:
    progress = {
        "description": "KafkaV2[Subscribe[playback]]",
        "startOffset": {"playback": {"0": 10, "1": 0}},
        "endOffset": '{"playback": {"0": 40, "1": 25, "2": 7}}',
        "latestOffset": {"playback": {"0": 100, "1": 25, "2": 9}},
    }
    assert kafka_lag([progress]) == (62, {"playback-0": 60, "playback-1": 0, "playback-2": 2})
    assert kafka_lag([{"description": "FileStreamSource[/landing]",
                       "endOffset": {"logOffset": 3}}]) == (None, None)


def test_the_checkpoint_pins_its_topic_id_and_refuses_a_recreated_topic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from spark_jobs import topology
    from tests.kafka.harness import kafka_pipeline

    home = WeirHome(tmp_path)
    pipeline = kafka_pipeline("playback", "k:9092")
    old, new = kafka.TopicInfo("playback", "id-old", 3), kafka.TopicInfo("playback", "id-new", 3)
    kafka.check_topic(home, pipeline, old)          # fresh checkpoint: pins the topic's id
    kafka.check_topic(home, pipeline, new)          # still fresh (nothing read): pins again
    (topology.checkpoint_location(home, pipeline, "ingest") / "offsets").mkdir(parents=True)
    (topology.checkpoint_location(home, pipeline, "ingest") / "offsets" / "0").write_text("v1\n")
    kafka.check_topic(home, pipeline, new)          # started on the pinned topic: fine
    with pytest.raises(kafka.TopicRecreatedError,
                       match=r"id id-new, now id-old.*weir checkpoint reset playback_kafka --from earliest"):
        kafka.check_topic(home, pipeline, old)
    pin = home.checkpoints(pipeline.name) / kafka.TOPIC_PIN
    assert json.loads(pin.read_text())["topic_id"] == "id-new"
    pin.unlink()                                     # a checkpoint from before pins: adopts
    kafka.check_topic(home, pipeline, old)
    assert json.loads(pin.read_text())["topic_id"] == "id-old"
