"""Secrets and command lines are their owner's only: Airflow's generated password file (as `make
up` prepares it and Airflow's own auth manager then writes it), launch records and driver logs
are 0600 in 0700 folders, and a secret given as Spark configuration or through an Airflow
connection or the environment never appears on any command line of the launched driver."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_jobs.control.driver import kill_launch, read_launch, spawn
from spark_jobs.control.store import LAUNCH, FileStore
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.session import JVM_OPTIONS
from tests.airflow.supervision_harness import LOCAL_MASTER

pytestmark = pytest.mark.airflow
SCRIPT = REPO_ROOT / "infra" / "airflow" / "private_files.sh"
PASSWORDS = "simple_auth_manager_passwords.json.generated"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def secure(home: WeirHome, airflow_home: Path) -> None:
    """`make up`'s step, run as up.sh runs it (sourced by bash)."""
    out = subprocess.run(["bash", "-c", f'source "{SCRIPT}" && secure_private_files "$0" "$1"',
                          str(home.root), str(airflow_home)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_airflow_password_file_and_logs_are_the_owners_only(home: WeirHome, tmp_path: Path) -> None:
    airflow_home = tmp_path / "airflow"
    airflow_home.mkdir(mode=0o755)
    home.logs.mkdir(mode=0o755)
    old_log = home.logs / "airflow-standalone.log"
    old_log.write_text("Password for user 'admin': left by an older run\n")
    old_log.chmod(0o644)
    secure(home, airflow_home)
    passwords = airflow_home / PASSWORDS
    modes = (mode(passwords), mode(airflow_home), mode(home.logs), mode(old_log))
    assert modes == (0o600, 0o700, 0o700, 0o600), [oct(m) for m in modes]

    # Airflow's own auth manager then writes the generated password into the file: it stays 0600.
    env = {**os.environ, "AIRFLOW_HOME": str(airflow_home),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin"}
    out = subprocess.run([sys.executable, "-c",
                          "from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import "
                          "SimpleAuthManager\nSimpleAuthManager().init()"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "admin" in json.loads(passwords.read_text()), "Airflow did not write its password file"
    assert mode(passwords) == 0o600

    passwords.chmod(0o644)                     # a file an older `make up` left readable is fixed
    secure(home, airflow_home)
    assert mode(passwords) == 0o600


def test_a_launch_record_and_its_log_are_the_owners_only(home: WeirHome) -> None:
    launched = spawn(home, "playback", [sys.executable, "-c", "print('harmless')"])
    try:
        record = FileStore(home).path("playback", LAUNCH)
        assert (mode(record), mode(record.parent), mode(home.logs)) == (0o600, 0o700, 0o700)
        assert mode(Path(launched.log_path)) == 0o600
    finally:
        kill_launch(home, "playback")


APP = """import hashlib
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
value = spark.conf.get("spark.hadoop.fs.s3a.secret.key")
print("SECRET-SHA256", hashlib.sha256(value.encode()).hexdigest(), flush=True)
spark.stop()
"""


def session_cmdlines(leader: int) -> list[str]:
    """The command lines of every process in the launch's session (spark-submit's JVM, the
    Python driver, their children)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == leader:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return lines


@pytest.mark.slow
def test_no_secret_on_the_launched_drivers_command_line(home: WeirHome, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from weir_airflow.hooks import WeirSparkSubmitHook

    secret = 'S3cr"et\\with=odd chars'                         # quotes, a backslash, separators
    kafka_password, spark_password = "kafka-Pa55-word", "spark-conn-Pa55"
    master = json.loads(LOCAL_MASTER)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({**master, "password": spark_password}))
    monkeypatch.setenv("AIRFLOW_CONN_WEIR_KAFKA", json.dumps(
        {"conn_type": "kafka", "host": "broker:9093", "login": "weir", "password": kafka_password}))
    monkeypatch.setenv("WEIR_KAFKA_SASL_PASSWORD", kafka_password)
    app = tmp_path / "app.py"
    app.write_text(APP)
    hook = WeirSparkSubmitHook(conn_id="spark_default", name="weir-secret-test",
                               conf={"spark.hadoop.fs.s3a.secret.key": secret, "spark.ui.enabled": "false",
                                     "spark.driver.extraJavaOptions": "-Dweir.pipeline.own=1"})
    record = hook.launch_detached(home, "playback", str(app))
    seen: list[str] = []
    log = Path(record.log_path)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "SECRET-SHA256" not in log.read_text(errors="replace"):
            seen += session_cmdlines(record.pid)
            time.sleep(0.2)
        seen += session_cmdlines(record.pid)
    finally:
        kill_launch(home, "playback")
    text = log.read_text(errors="replace")
    # The secret reached Spark intact, through the private properties file.
    assert f"SECRET-SHA256 {hashlib.sha256(secret.encode()).hexdigest()}" in text, text[-3000:]
    assert any("SparkSubmit" in line for line in seen), "the JVM was never seen running"
    # The driver JVM got Weir's JVM options on its command line (`session.jvm_conf`), as a session
    # builder cannot give them to a JVM that spark-submit already started; the pipeline's own
    # driver options come after them, replacing none.
    assert any("SparkSubmit" in line and f"{JVM_OPTIONS} " in line
               and line.index(JVM_OPTIONS) < line.index("-Dweir.pipeline.own=1") for line in seen), seen
    for value in (secret, "S3cr", kafka_password, spark_password):
        assert not [line for line in seen if value in line], f"{value!r} on a command line"
        assert value not in " ".join(read_launch(home, "playback").command)
        assert value not in text, f"{value!r} in the driver log"
    properties = home.control("playback") / "spark-secrets.properties"
    assert mode(properties) == 0o600 and mode(FileStore(home).path("playback", LAUNCH)) == 0o600
