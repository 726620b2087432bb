"""The platform's configuration: every `WEIR_*` environment variable as one typed, validated field.

`settings()` is what the code reads; nothing else looks at `WEIR_*` variables. A field `x` is the
variable `WEIR_X`; an unset or empty variable means the field's default. Each process reads its own
environment (a detached driver inherits its launcher's), and a bad value fails with the variable's
name, not somewhere deep in Spark. `make up` and the local Kafka broker read a few variables of their
own (see their scripts); those are not the platform's configuration.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from spark_jobs.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "WEIR_"
SPARK_LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")
# Field metadata: `kafka` names the Kafka client setting a `WEIR_KAFKA_*` field overrides.
KAFKA = "kafka"


class SettingsError(UserError, ValueError):
    """A `WEIR_*` variable whose value cannot be used; the message names the variable."""


def _kafka(setting: str, *, secret: bool = False) -> str | None:
    # Secrets stay out of `repr` (tracebacks, logs); see also `KafkaConnection.describe`.
    return field(default=None, repr=not secret, metadata={KAFKA: setting})


@dataclass(frozen=True)
class Settings:
    """Every `WEIR_*` variable of the platform, parsed; the README's configuration table lists
    exactly these fields (a test compares them)."""

    home: Path = REPO_ROOT / ".weir"
    conf: Path = REPO_ROOT / "conf"
    spark_master: str = "local[*]"
    spark_log_level: str = "WARN"
    jar_cache: Path = REPO_ROOT / ".cache" / "jars"
    lease_ttl_s: float = 30.0
    # Where leases, heartbeats, stop requests and supervisor state live: unset, files under
    # WEIR_HOME; a postgresql:// URL, that database (hosts need not share a filesystem). It may
    # carry a password: kept out of `repr`.
    control_store: str | None = field(default=None, repr=False)
    actor: str | None = None
    kafka_connection: str | None = None
    kafka_preflight_timeout_s: float = 20.0
    kafka_bootstrap_servers: str | None = _kafka("bootstrap.servers")
    kafka_security_protocol: str | None = _kafka("security.protocol")
    kafka_sasl_mechanism: str | None = _kafka("sasl.mechanism")
    kafka_sasl_username: str | None = _kafka("sasl.username")
    kafka_sasl_password: str | None = _kafka("sasl.password", secret=True)
    kafka_sasl_jaas_config: str | None = _kafka("sasl.jaas.config", secret=True)
    kafka_ssl_ca_location: str | None = _kafka("ssl.ca.location")
    kafka_ssl_truststore_location: str | None = _kafka("ssl.truststore.location")
    kafka_ssl_truststore_password: str | None = _kafka("ssl.truststore.password", secret=True)
    kafka_ssl_endpoint_identification_algorithm: str | None = _kafka(
        "ssl.endpoint.identification.algorithm")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Parse and check every field's variable in `environ`; `SettingsError` on a bad value."""
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(variable(f.name), "")
            if raw:  # empty is unset, as it always was for the Kafka variables and WEIR_ACTOR
                values[f.name] = _parse(f.name, f.default, raw)
        return cls(**values)  # type: ignore[arg-type]

    def kafka_settings(self) -> dict[str, str]:
        """The Kafka client settings given by `WEIR_KAFKA_*` variables (dotted Kafka names)."""
        return {f.metadata[KAFKA]: getattr(self, f.name) for f in fields(self)
                if KAFKA in f.metadata and getattr(self, f.name)}


def variable(name: str) -> str:
    """The environment variable of the field `name`: `lease_ttl_s` → `WEIR_LEASE_TTL_S`."""
    return PREFIX + name.upper()


def variables() -> tuple[str, ...]:
    """Every variable `Settings` reads, in field order."""
    return tuple(variable(f.name) for f in fields(Settings))


def _parse(name: str, default: object, raw: str) -> object:
    """`raw` as the type of the field's default (a None default: a string), checked."""
    if isinstance(default, Path):
        return Path(raw).expanduser()
    if isinstance(default, float):
        try:
            seconds = float(raw)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or seconds <= 0:
            raise SettingsError(f"{variable(name)} must be a number of seconds above 0, not {raw!r}")
        return seconds
    if name == "control_store" and not raw.startswith(("postgresql://", "postgres://")):
        raise SettingsError(f"{variable(name)} must be a postgresql:// URL (unset: files under "
                            f"WEIR_HOME), not {raw.split('@')[-1]!r}")
    if name == "spark_log_level" and raw.upper() not in SPARK_LOG_LEVELS:
        raise SettingsError(f"{variable(name)} must be one of {', '.join(SPARK_LOG_LEVELS)}, not {raw!r}")
    return raw


def settings() -> Settings:
    """This process's settings, parsed once per distinct set of `WEIR_*` values: tests, benchmarks
    and the CLI set variables in-process, and a changed value must never be served stale."""
    return _parsed(tuple((name, os.environ[name]) for name in variables() if name in os.environ))


def reset_settings() -> None:
    """Forget the parsed settings, for a test that changed the environment without `os.environ`
    (`os.putenv`) or wants a fresh parse."""
    _parsed.cache_clear()


@functools.lru_cache(maxsize=8)
def _parsed(items: tuple[tuple[str, str], ...]) -> Settings:
    return Settings.from_env(dict(items))
