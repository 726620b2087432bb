"""A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) on 127.0.0.1, for
development, `make up` and the tests. Production uses a real cluster; this is the same broker
code, resolved from Maven Central (`org.apache.kafka:kafka_2.13`, see `pom.xml`), not a mock.

    broker.py install            resolve the jars into .cache/kafka/lib (idempotent, for `make setup`)
    broker.py start [--port N]   format the storage once, start, wait until it answers
    broker.py stop               SIGTERM (controlled shutdown), SIGKILL after a grace period
    broker.py status [--json]    exit 0 when running, 3 when not

Data, generated configuration and `broker.json` (pid, bootstrap servers, ports) live under
`WEIR_HOME/kafka`; the broker's log is `WEIR_HOME/logs/kafka.log`. The port is free by default,
fixed by `--port` or `WEIR_KAFKA_PORT`, and kept across restarts so clients reconnect: when another
process holds it, `start` refuses in one line naming that process.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.ports import bindable, free_ports, holder

log = logging.getLogger("weir.kafka.broker")

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
CACHE = Path(os.environ.get("WEIR_KAFKA_CACHE", REPO_ROOT / ".cache" / "kafka"))
LIB = CACHE / "lib"
STAMP = CACHE / "installed.txt"
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 30.0
NOT_RUNNING = 3  # LSB status code: "program is not running"
# Refused connections while the broker boots are expected: the readiness probe stays quiet.
PROBE_LOG = logging.getLogger("weir.kafka.broker.probe")
PROBE_LOG.setLevel(logging.CRITICAL)


class BrokerError(RuntimeError):
    """The broker could not be installed, started or stopped; the message says why."""


@dataclass(frozen=True)
class BrokerState:
    """What `broker.json` records about the broker of one WEIR_HOME."""

    pid: int
    port: int
    controller_port: int
    cluster_id: str
    bootstrap_servers: str
    data_dir: str
    log_file: str
    started_at: float


def install() -> Path:
    """Resolve kafka_2.13 and its runtime dependencies into the cache; a no-op when current."""
    wanted = hashlib.sha256(POM.read_bytes()).hexdigest()
    if STAMP.is_file() and STAMP.read_text() == wanted and any(LIB.glob("kafka_2.13-*.jar")):
        return LIB
    if shutil.which("mvn") is None:
        raise BrokerError("Maven (mvn) is needed once to resolve the Kafka broker: apt-get install maven")
    staging = CACHE / "lib.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
         f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        check=True)
    shutil.rmtree(LIB, ignore_errors=True)
    staging.rename(LIB)
    STAMP.write_text(wanted)
    log.info("Kafka broker jars resolved into %s", LIB)
    return LIB


def _classpath() -> str:
    if not STAMP.is_file() or not any(LIB.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Kafka broker not installed ({LIB} empty): run `infra/kafka/broker.sh install`")
    return str(LIB / "*")


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (like `kafka-storage
    random-uuid`). Never one starting with "-", which the storage tool would read as an option
    (Kafka's own `Uuid.randomUuid` redraws those too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _state_file(home: WeirHome) -> Path:
    return home.kafka / "broker.json"


def read_state(home: WeirHome) -> BrokerState | None:
    path = _state_file(home)
    if not path.is_file():
        return None
    return BrokerState(**json.loads(path.read_text()))


def _alive(pid: int, config: Path) -> bool:
    """Whether `pid` is this home's broker (not a recycled pid of another process)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in cmdline and str(config).encode() in cmdline


def running(home: WeirHome) -> BrokerState | None:
    state = read_state(home)
    if state and _alive(state.pid, home.kafka / "server.properties"):
        return state
    return None


def _server_properties(port: int, controller_port: int, data: Path) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "3",
        # Topics are created on purpose (`weir produce`), so a typo or a deleted topic is an error.
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A small machine shared with Spark: few threads.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "num.recovery.threads.per.data.dir": "1",
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log=WARN
log4j.logger.org.apache.kafka.storage=WARN
log4j.logger.kafka.coordinator=WARN
log4j.logger.org.apache.kafka.coordinator=WARN
"""


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not java:
        raise BrokerError("no java found (set JAVA_HOME)")
    return str(java)


def _answers(bootstrap: str, timeout_s: float) -> bool:
    """Whether the broker answers a metadata request (its listener is up and it is registered)."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError:
        return False
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:  # without the Python client the probe is the TCP connect alone
        return True
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000),
                         "logger": PROBE_LOG})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(metadata.brokers)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _ports(previous: BrokerState | None, port: int | None) -> tuple[int, int]:
    """The listener's and the controller's ports of a start.

    The listener's is `port` (`--port`), else `WEIR_KAFKA_PORT`, else the previous run's, which
    the clients hold, else a free one. Another process holding a port so chosen is refused, naming
    the holder: a broker on another port would leave its clients knocking at the old one. The
    controller's port is the previous run's while it is free, else a free one: only the broker
    itself connects to it."""
    spare, other = free_ports(2)  # distinct, so a drawn port never meets the drawn controller port
    chosen = [(port, "--port"), (int(os.environ.get("WEIR_KAFKA_PORT", 0)), "WEIR_KAFKA_PORT"),
              (previous.port if previous else 0, "the previous run's port, kept for its clients")]
    given, origin = next(((p, why) for p, why in chosen if p), (0, ""))
    if given and not bindable(given):
        raise BrokerError(f"port {given} ({origin}) is held by {holder(given)}: stop that process, or "
                          "start the broker on another port (--port N or WEIR_KAFKA_PORT=N) and give "
                          "its clients 127.0.0.1:N")
    listener = given or spare
    kept = previous.controller_port if previous and previous.port == listener else 0
    if kept and not bindable(kept):
        log.warning("the previous controller port %d is held by %s: the controller takes another",
                    kept, holder(kept))
        kept = 0
    return listener, kept or next(drawn for drawn in (spare, other) if drawn != listener)


def start(home: WeirHome, port: int | None = None, timeout_s: float = READY_TIMEOUT_S) -> BrokerState:
    """Start the broker of `home` unless it runs already; return once it answers."""
    current = running(home)
    if current:
        return current
    classpath = _classpath()
    previous = read_state(home)
    port, controller_port = _ports(previous, port)
    root, data = home.kafka, home.kafka / "data"
    root.mkdir(parents=True, exist_ok=True)
    home.logs.mkdir(parents=True, exist_ok=True)
    config = root / "server.properties"
    config.write_text(_server_properties(port, controller_port, data))
    (root / "log4j.properties").write_text(LOG4J)
    log_file = home.logs / "kafka.log"
    java = _java()
    jvm = [java, f"-Xmx{os.environ.get('WEIR_KAFKA_HEAP', '384m')}", "-Xms64m", "-XX:+UseG1GC",
           "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{root / 'log4j.properties'}",
           f"-Dkafka.logs.dir={home.logs}", "-cp", classpath]
    cluster_id = previous.cluster_id if previous and (data / "meta.properties").is_file() else ""
    if not cluster_id:
        cluster_id = _cluster_id()
        with open(log_file, "ab") as out:
            formatted = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
                 "--ignore-formatted"], stdout=out, stderr=subprocess.STDOUT, check=False)
        if formatted.returncode != 0:
            raise BrokerError(f"formatting {data} failed; see {log_file}:\n{_tail(log_file)}")
    with open(log_file, "ab") as out:
        process = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=root)
    state = BrokerState(pid=process.pid, port=port, controller_port=controller_port,
                        cluster_id=cluster_id, bootstrap_servers=f"127.0.0.1:{port}",
                        data_dir=str(data), log_file=str(log_file), started_at=time.time())
    _state_file(home).write_text(json.dumps(asdict(state), indent=2))
    (root / "broker.pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            taken = [p for p in (port, controller_port) if not bindable(p)]
            if taken and "Address already in use" in _tail(log_file, 200):
                raise BrokerError(f"port {taken[0]} was taken by {holder(taken[0])} while the broker "
                                  f"started; start it again (see {log_file})")
            raise BrokerError(f"broker exited with {process.returncode}; see {log_file}:\n{_tail(log_file)}")
        if _answers(state.bootstrap_servers, 2.0):
            log.info("Kafka broker %d answers on %s (data %s)", state.pid, state.bootstrap_servers, data)
            return state
        time.sleep(0.5)
    stop(home)
    raise BrokerError(f"broker did not answer on {state.bootstrap_servers} within {timeout_s:.0f}s; "
                      f"see {log_file}:\n{_tail(log_file)}")


def stop(home: WeirHome, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the broker gracefully (controlled shutdown on SIGTERM), SIGKILL after `grace_s`.
    Returns whether a broker was running."""
    state = read_state(home)
    config = home.kafka / "server.properties"
    if not state or not _alive(state.pid, config):
        return False
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(state.pid, config) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(state.pid, config):
        log.warning("Kafka broker %d ignored SIGTERM for %.0fs: killing it", state.pid, grace_s)
        os.kill(state.pid, signal.SIGKILL)
        while _alive(state.pid, config):
            time.sleep(0.1)
    (home.kafka / "broker.pid").unlink(missing_ok=True)
    log.info("Kafka broker %d stopped", state.pid)
    return True


def kill(home: WeirHome) -> bool:
    """SIGKILL the broker (a crash, for fault-injection tests). Returns whether one was running."""
    state = read_state(home)
    config = home.kafka / "server.properties"
    if not state or not _alive(state.pid, config):
        return False
    os.kill(state.pid, signal.SIGKILL)
    while _alive(state.pid, config):
        time.sleep(0.1)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infra/kafka/broker.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("install", "start", "stop", "kill", "status"))
    parser.add_argument("--port", type=int, help="listener port (default: WEIR_KAFKA_PORT, the "
                        "port of the previous run, else a free one)")
    parser.add_argument("--json", action="store_true", help="print the broker state as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    home = WeirHome.from_env()
    try:
        if args.action == "install":
            print(f"Kafka broker jars in {install()}")
            return 0
        if args.action == "start":
            state = start(home, args.port)
            print(json.dumps(asdict(state)) if args.json else f"kafka running: pid {state.pid}, "
                  f"bootstrap {state.bootstrap_servers}, data {state.data_dir}")
            return 0
        if args.action in ("stop", "kill"):
            was = stop(home) if args.action == "stop" else kill(home)
            print("kafka stopped" if was else "kafka was not running")
            return 0
        state = running(home)
        if args.json:
            print(json.dumps({"running": state is not None, **(asdict(state) if state else {})}))
        else:
            print(f"kafka running: pid {state.pid}, bootstrap {state.bootstrap_servers}" if state
                  else "kafka not running")
        return 0 if state else NOT_RUNNING
    except (BrokerError, subprocess.CalledProcessError) as err:
        print(f"broker {args.action}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
