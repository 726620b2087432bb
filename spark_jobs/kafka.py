"""Kafka for Weir pipelines: where the brokers are and how to authenticate (from the environment
or an Airflow connection, never logged), the options of the Spark source, a producer for
`weir produce`, lag per partition from a query's progress, and starting points for resets.

Security settings, read in this order (later wins):
1. the Airflow connection named by the catalog (`KafkaSource.connection`) or `WEIR_KAFKA_CONNECTION`:
   host[:port] → bootstrap servers, login/password → SASL credentials, extra (JSON) → the keys below;
   looked up in `AIRFLOW_CONN_<ID>` (JSON or URI) first, then through Airflow itself;
2. the environment: `WEIR_KAFKA_BOOTSTRAP_SERVERS`, `WEIR_KAFKA_SECURITY_PROTOCOL`,
   `WEIR_KAFKA_SASL_MECHANISM`, `WEIR_KAFKA_SASL_USERNAME`, `WEIR_KAFKA_SASL_PASSWORD`,
   `WEIR_KAFKA_SASL_JAAS_CONFIG`, `WEIR_KAFKA_SSL_CA_LOCATION` (PEM),
   `WEIR_KAFKA_SSL_TRUSTSTORE_LOCATION`, `WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD`,
   `WEIR_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM`.
Bootstrap servers `local` mean the development broker of `infra/kafka` under WEIR_HOME.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from spark_jobs import topology
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    from spark_jobs.catalog import KafkaSource, Pipeline

log = logging.getLogger(__name__)

LOCAL = "local"
ENV_PREFIX = "WEIR_KAFKA_"
# Setting names (Kafka's own, dotted) that may be given; the Java client (Spark) and librdkafka
# (the Python producer) spell some differently, see `KafkaConnection`.
SETTINGS = (
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
    "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.endpoint.identification.algorithm",
)
SECRET_SETTINGS = frozenset({"sasl.password", "sasl.jaas.config", "ssl.truststore.password"})
JAVA_ONLY = frozenset({"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.password"})
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
RESET_MARKER = "kafka-starting-point.json"


def preflight_timeout_s() -> float:
    """How long a start waits for the brokers to answer before it fails."""
    return float(os.environ.get("WEIR_KAFKA_PREFLIGHT_TIMEOUT_S", "20"))


class KafkaUnavailableError(UserError):
    """The brokers did not answer, or the topic is not there: the stream cannot start."""


@dataclass(frozen=True)
class KafkaConnection:
    """Bootstrap servers plus security settings. `repr` and `describe` never show a secret."""

    bootstrap_servers: str
    settings: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"KafkaConnection({self.describe()})"

    def describe(self) -> str:
        """A line safe for logs: servers, protocol, mechanism, and which secrets are set."""
        shown = {k: ("***" if k in SECRET_SETTINGS else v) for k, v in sorted(self.settings.items())}
        extra = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"bootstrap {self.bootstrap_servers}" + (f", {extra}" if extra else "")

    def java_properties(self) -> dict[str, str]:
        """Kafka Java client properties (what Spark's connector takes, prefixed with `kafka.`)."""
        props = {"bootstrap.servers": self.bootstrap_servers}
        s = dict(self.settings)
        for key in ("security.protocol", "sasl.mechanism", "ssl.truststore.location",
                    "ssl.truststore.password", "ssl.endpoint.identification.algorithm"):
            if key in s:
                props[key] = s[key]
        if "ssl.ca.location" in s and "ssl.truststore.location" not in s:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = s["ssl.ca.location"]
        if "sasl.jaas.config" in s:
            props["sasl.jaas.config"] = s["sasl.jaas.config"]
        elif "sasl.username" in s:
            mechanism = s.get("sasl.mechanism", "PLAIN").upper()
            module = LOGIN_MODULES.get(mechanism)
            if module is None:
                raise UserError(f"Kafka SASL mechanism {mechanism} needs WEIR_KAFKA_SASL_JAAS_CONFIG")
            user = s["sasl.username"].replace('"', '\\"')
            password = s.get("sasl.password", "").replace('"', '\\"')
            props["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
        return props

    def spark_options(self) -> dict[str, str]:
        return {f"kafka.{k}": v for k, v in self.java_properties().items()}

    def client_config(self) -> dict[str, Any]:
        """librdkafka configuration (confluent-kafka) with the same servers and credentials."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        config.update({k: v for k, v in self.settings.items() if k not in JAVA_ONLY})
        return config


def _from_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for key in SETTINGS:
        value = env.get(ENV_PREFIX + key.upper().replace(".", "_"))
        if value:
            out[key] = value
    return out


def _airflow_connection(conn_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """Settings from an Airflow connection: `AIRFLOW_CONN_<ID>` (JSON or URI), else Airflow's own
    lookup (secrets backends, metadata DB). Host and port give the bootstrap servers."""
    raw = env.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    host = login = password = None
    extra: dict[str, Any] = {}
    if raw and raw.lstrip().startswith("{"):
        conn = json.loads(raw)
        host = conn.get("host") and (f"{conn['host']}:{conn['port']}" if conn.get("port") else conn["host"])
        login, password = conn.get("login"), conn.get("password")
        extra = conn.get("extra") or {}
        extra = json.loads(extra) if isinstance(extra, str) else extra
    elif raw:
        url = urlsplit(raw)
        host = url.netloc.rsplit("@", 1)[-1] or None
        login = unquote(url.username) if url.username else None
        password = unquote(url.password) if url.password else None
        extra = dict(parse_qsl(url.query))
    else:
        try:
            from airflow.sdk import Connection
        except ImportError as err:
            raise UserError(f"Kafka connection {conn_id!r}: not in AIRFLOW_CONN_{conn_id.upper()} "
                            "and Airflow is not installed") from err
        conn = Connection.get(conn_id)
        host = conn.host and (f"{conn.host}:{conn.port}" if conn.port else conn.host)
        login, password, extra = conn.login, conn.password, conn.extra_dejson
    out = {k: str(v) for k, v in extra.items() if k in SETTINGS}
    if host:
        out.setdefault("bootstrap.servers", host)
    if login:
        out["sasl.username"] = login
    if password:
        out["sasl.password"] = password
    return out


def local_bootstrap(home: WeirHome) -> str:
    """Bootstrap servers of the development broker under `home` (see infra/kafka/broker.py)."""
    state = home.kafka / "broker.json"
    if not state.is_file():
        raise KafkaUnavailableError(
            f"no local Kafka broker under {home.kafka}: run `infra/kafka/broker.sh start`")
    return str(json.loads(state.read_text())["bootstrap_servers"])


def connection(source: KafkaSource, *, home: WeirHome | None = None,
               env: Mapping[str, str] | None = None) -> KafkaConnection:
    """Servers and security of `source`: catalog, then Airflow connection, then environment."""
    env = os.environ if env is None else env
    settings: dict[str, str] = {}
    conn_id = env.get(ENV_PREFIX + "CONNECTION") or source.connection
    if conn_id:
        settings.update(_airflow_connection(conn_id, env))
    settings.update(_from_env(env))
    bootstrap = settings.pop("bootstrap.servers", source.bootstrap_servers)
    if bootstrap == LOCAL:
        bootstrap = local_bootstrap(home or WeirHome.from_env())
    return KafkaConnection(bootstrap, settings)


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


def source_options(home: WeirHome, pipeline: Pipeline, source: KafkaSource,
                   conn: KafkaConnection) -> dict[str, str]:
    """Every option of the Spark Kafka source of `pipeline` (secrets included: never log this)."""
    options = {
        **conn.spark_options(),
        "subscribe": source.topic,
        "failOnDataLoss": str(source.fail_on_data_loss).lower(),
        "groupIdPrefix": f"weir-{pipeline.name}",
        **starting_point(home, pipeline, source),
    }
    if source.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    return options
