"""The one settings object: every `WEIR_*` variable a typed field, checked with the variable's name
in the error, documented in the README's table (compared here so the two cannot drift), and the only
reader of `WEIR_*` variables in the package and the plugin."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs import cli
from spark_jobs.control import liveness
from spark_jobs.control.driver import driver_environment
from spark_jobs.errors import UserError
from spark_jobs.kafka.connection import SETTINGS as KAFKA_SETTINGS
from spark_jobs.settings import (
    KAFKA,
    REPO_ROOT,
    Settings,
    SettingsError,
    reset_settings,
    settings,
    variable,
    variables,
)

README = REPO_ROOT / "README.md"
# A read of a WEIR_* variable straight from the environment: os.environ["WEIR_…"],
# os.environ.get("WEIR_…"), os.getenv("WEIR_…").
DIRECT_READ = re.compile(r"""(environ\s*\[|environ\.get\(|getenv\()\s*f?["']WEIR_""")


def readme_table() -> dict[str, str]:
    """`variable → default` of the README's configuration table (the first code span of a
    default cell, or its text)."""
    section = README.read_text(encoding="utf-8").split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `WEIR_") and len(cells) == 3:
            code = re.match(r"`([^`]*)`", cells[1])
            rows[cells[0].strip("`")] = code.group(1) if code else cells[1]
    return rows


def shown(default: object) -> str:
    """A field's default as the README writes it."""
    if default is None:
        return "unset"
    if isinstance(default, Path):
        return f"./{default.relative_to(REPO_ROOT)}"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def test_the_readme_table_lists_exactly_the_settings_with_their_defaults() -> None:
    documented = readme_table()
    assert list(documented) == list(variables())
    assert documented == {variable(f.name): shown(f.default) for f in dataclasses.fields(Settings)}


def test_every_variable_is_parsed_into_its_typed_field() -> None:
    parsed = Settings.from_env({
        "WEIR_HOME": "~/weir", "WEIR_CONF": "/etc/weir", "WEIR_LEASE_TTL_S": "2.5",
        "WEIR_SPARK_LOG_LEVEL": "error", "WEIR_ACTOR": "oncall", "WEIR_KAFKA_PREFLIGHT_TIMEOUT_S": "5",
        "WEIR_KAFKA_SASL_USERNAME": "svc", "WEIR_KAFKA_SSL_CA_LOCATION": "/ca.pem",
        "WEIR_UNRELATED": "x", "HOME": "/nowhere"})
    assert parsed.home == Path("~/weir").expanduser()
    assert parsed.conf == Path("/etc/weir")
    assert parsed.lease_ttl_s == 2.5
    assert parsed.spark_log_level == "error"              # Spark takes any case
    assert parsed.actor == "oncall"
    assert parsed.kafka_preflight_timeout_s == 5.0
    assert parsed.kafka_settings() == {"sasl.username": "svc", "ssl.ca.location": "/ca.pem"}
    assert parsed.spark_master == "local[*]" and parsed.jar_cache == REPO_ROOT / ".cache" / "jars"


def test_unset_or_empty_variables_mean_the_defaults() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({v: "" for v in variables()}) == Settings()
    assert Settings().home == REPO_ROOT / ".weir" and Settings().lease_ttl_s == 30.0


@pytest.mark.parametrize(("name", "value"), [
    ("WEIR_LEASE_TTL_S", "soon"), ("WEIR_LEASE_TTL_S", "0"), ("WEIR_LEASE_TTL_S", "nan"),
    ("WEIR_KAFKA_PREFLIGHT_TIMEOUT_S", "-1"), ("WEIR_SPARK_LOG_LEVEL", "LOUD"),
])
def test_a_bad_value_is_a_user_error_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({name: value})
    assert isinstance(caught.value, UserError)
    message = str(caught.value)
    assert message.startswith(name) and repr(value) in message and "\n" not in message


def test_the_cli_reports_a_bad_variable_in_one_line_and_exits_2(
        home: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WEIR_LEASE_TTL_S", "soon")
    assert cli.main(["status", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("weir status: WEIR_LEASE_TTL_S must be")


def test_settings_follow_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIR_LEASE_TTL_S", "2")
    assert settings().lease_ttl_s == 2.0 and liveness.lease_ttl_s() == 2.0
    assert settings() is settings()                      # parsed once, not per call
    monkeypatch.setenv("WEIR_LEASE_TTL_S", "7")          # changed in-process: never served stale
    assert liveness.lease_ttl_s() == 7.0
    monkeypatch.delenv("WEIR_LEASE_TTL_S")
    assert liveness.lease_ttl_s() == 30.0
    first = settings()
    reset_settings()                                     # a fresh parse, same values
    assert settings() == first and settings() is not first


def test_a_driver_process_reads_its_own_inherited_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIR_HOME", str(tmp_path / "launcher-home"))
    monkeypatch.setenv("WEIR_LEASE_TTL_S", "3")
    probe = ("from spark_jobs.home import WeirHome; from spark_jobs.settings import settings; "
             "print(WeirHome.from_env().root, settings().lease_ttl_s)")
    env = {**driver_environment(), "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert out == [str(tmp_path / "launcher-home"), "3.0"]


def test_kafka_fields_are_the_connection_settings_and_secrets_are_not_shown() -> None:
    declared = {f.metadata[KAFKA] for f in dataclasses.fields(Settings) if KAFKA in f.metadata}
    assert declared == set(KAFKA_SETTINGS)
    secret = Settings.from_env({"WEIR_KAFKA_SASL_PASSWORD": "hunter2",
                                "WEIR_KAFKA_SASL_JAAS_CONFIG": "jaas-x",
                                "WEIR_KAFKA_SSL_TRUSTSTORE_PASSWORD": "store-x"})
    assert not [s for s in ("hunter2", "jaas-x", "store-x") if s in repr(secret)]


def test_no_module_but_settings_reads_weir_variables() -> None:
    sources = [path for folder in ("spark_jobs", "plugins/weir_airflow", "dags")
               for path in (REPO_ROOT / folder).rglob("*.py")]
    readers = [str(p.relative_to(REPO_ROOT)) for p in sources
               if p != REPO_ROOT / "spark_jobs" / "settings.py" and DIRECT_READ.search(p.read_text())]
    assert readers == []
