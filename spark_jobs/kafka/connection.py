"""Where a pipeline's brokers are and how to authenticate: from an Airflow connection and the
environment, never logged, shown or put on a command line.

Security settings, read in this order (later wins):
1. the Airflow connection named by the catalog (`KafkaSource.connection`) or `WEIR_KAFKA_CONNECTION`:
   host[:port] → bootstrap servers, login/password → SASL credentials, extra (JSON) → the keys below
   (several bootstrap servers go in extra as `bootstrap.servers`); looked up in `AIRFLOW_CONN_<ID>`
   (JSON or URI, parsed by Airflow's own `Connection`) first, then through Airflow itself;
2. the environment: `WEIR_KAFKA_BOOTSTRAP_SERVERS`, `WEIR_KAFKA_SECURITY_PROTOCOL`,
   `WEIR_KAFKA_SASL_MECHANISM`, `WEIR_KAFKA_SASL_USERNAME`, `WEIR_KAFKA_SASL_PASSWORD`,
   `WEIR_KAFKA_SASL_JAAS_CONFIG`, `WEIR_KAFKA_SSL_CA_LOCATION` (PEM),
   `WEIR_KAFKA_SSL_TRUSTSTORE_LOCATION`, `WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD`,
   `WEIR_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM`.
Bootstrap servers `local` mean the development broker of `infra/kafka` under WEIR_HOME.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.settings import Settings, settings

if TYPE_CHECKING:
    from spark_jobs.catalog import KafkaSource

LOCAL = "local"
AIRFLOW_CONN_PREFIX = "AIRFLOW_CONN_"
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
# Kafka parses `sasl.jaas.config` with java.io.StreamTokenizer: inside "…" a backslash starts an
# escape (\\, \", \n, octal…) and a raw line end ends the string, so each is written escaped.
_JAAS_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


class KafkaUnavailableError(UserError):
    """The brokers did not answer, or the topic is not there: the stream cannot start."""


def jaas_quoted(value: str) -> str:
    """`value` as a double-quoted JAAS option value that Kafka reads back unchanged."""
    return '"' + value.translate(_JAAS_ESCAPES) + '"'


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
            props["sasl.jaas.config"] = (
                f"{module} required username={jaas_quoted(s['sasl.username'])} "
                f"password={jaas_quoted(s.get('sasl.password', ''))};")
        return props

    def spark_options(self) -> dict[str, str]:
        """The Spark source's `kafka.*` options: handed to the reader in-process, never to a
        command line (they hold the secrets)."""
        return {f"kafka.{k}": v for k, v in self.java_properties().items()}

    def client_config(self) -> dict[str, Any]:
        """librdkafka configuration (confluent-kafka) with the same servers and credentials."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        config.update({k: v for k, v in self.settings.items() if k not in JAVA_ONLY})
        return config


def airflow_connection(conn_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """Settings from the Airflow connection `conn_id`: `AIRFLOW_CONN_<ID>` (JSON or URI, read as
    Airflow's environment backend reads it), else Airflow's own lookup (secrets backends, API)."""
    try:
        from airflow.sdk import Connection
    except ImportError as err:
        raise UserError(f"Kafka connection {conn_id!r} needs Airflow (apache-airflow) installed "
                        "to be read") from err
    raw = (env.get(AIRFLOW_CONN_PREFIX + conn_id.upper()) or "").strip()
    if raw.startswith("{"):
        conn = Connection.from_json(raw, conn_id=conn_id)
    elif raw:
        conn = Connection.from_uri(raw, conn_id=conn_id)
    else:
        conn = Connection.get(conn_id)
    out = {k: str(v) for k, v in conn.extra_dejson.items() if k in SETTINGS}
    if conn.host:
        out.setdefault("bootstrap.servers", f"{conn.host}:{conn.port}" if conn.port else conn.host)
    if conn.login:
        out["sasl.username"] = conn.login
    if conn.password:
        out["sasl.password"] = conn.password
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
    """Servers and security of `source`: catalog, then Airflow connection, then environment
    (this process's, or `env` when given)."""
    weir = settings() if env is None else Settings.from_env(env)
    env = os.environ if env is None else env
    found: dict[str, str] = {}
    conn_id = weir.kafka_connection or source.connection
    if conn_id:
        found.update(airflow_connection(conn_id, env))
    found.update(weir.kafka_settings())
    bootstrap = found.pop("bootstrap.servers", source.bootstrap_servers)
    if bootstrap == LOCAL:
        bootstrap = local_bootstrap(home or WeirHome.from_env())
    return KafkaConnection(bootstrap, found)
