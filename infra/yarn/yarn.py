"""A single-node Apache YARN cluster (a ResourceManager and a NodeManager, two JVMs) on 127.0.0.1,
for the production profile and the tests of cluster deploy mode. Production uses a real cluster;
this is the same Hadoop code, resolved from Maven Central (`org.apache.hadoop`, see `pom.xml`).

    yarn.py install            resolve the jars into .cache/yarn/lib (idempotent, for `make setup`)
    yarn.py start [--json]     write the configuration, start RM and NM, wait until the NM is RUNNING
    yarn.py stop               SIGTERM both, SIGKILL after a grace period
    yarn.py status [--json]    exit 0 when both run, 3 when not

Configuration (`yarn-site.xml`, `core-site.xml` with `fs.defaultFS=file:///`), NodeManager
directories and `yarn.json` (pids, ports, URLs) live under `WEIR_HOME/yarn`; logs are
`WEIR_HOME/logs/yarn-{resourcemanager,nodemanager}.log`. Ports are free ones picked at start
(the RM web port is `WEIR_YARN_RM_WEB_PORT` when set), kept across restarts. Point Spark at it
with `HADOOP_CONF_DIR=WEIR_HOME/yarn/conf` and the Airflow connection `start` prints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from xml.sax.saxutils import escape

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from spark_jobs.home import WeirHome  # noqa: E402
from spark_jobs.ports import free_ports  # noqa: E402

log = logging.getLogger("weir.yarn")

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
CACHE = Path(os.environ.get("WEIR_YARN_CACHE", REPO / ".cache" / "yarn"))
LIB = CACHE / "lib"
STAMP = CACHE / "installed.txt"
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0
NOT_RUNNING = 3  # LSB status code: "program is not running"
RM_MAIN = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NM_MAIN = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
# A small machine shared with Spark and Airflow: small daemons, a NodeManager offering 4 GB.
NM_MEMORY_MB = int(os.environ.get("WEIR_YARN_NM_MEMORY_MB", "4096"))
NM_VCORES = 4
HEAP = os.environ.get("WEIR_YARN_HEAP", "384m")
# Hadoop's JVMs reflect into java.base on Java 17 (as Hadoop's own scripts allow).
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs",
    "sun.security.action", "sun.util.calendar")]


class YarnError(RuntimeError):
    """The cluster could not be installed, started or stopped; the message says why."""


@dataclass(frozen=True)
class YarnState:
    """What `yarn.json` records about the cluster of one WEIR_HOME."""

    rm_pid: int
    nm_pid: int
    ports: dict[str, int]
    rm_url: str
    conf_dir: str
    airflow_conn_spark_default: str
    started_at: float


def install() -> Path:
    """Resolve the ResourceManager, NodeManager and their dependencies; a no-op when current."""
    wanted = hashlib.sha256(POM.read_bytes()).hexdigest()
    if STAMP.is_file() and STAMP.read_text() == wanted and any(LIB.glob("hadoop-yarn-server-nodemanager-*.jar")):
        return LIB
    if shutil.which("mvn") is None:
        raise YarnError("Maven (mvn) is needed once to resolve YARN: apt-get install maven")
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = CACHE / "lib.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}", "-DincludeScope=runtime"], check=True)
    shutil.rmtree(LIB, ignore_errors=True)
    staging.rename(LIB)
    STAMP.write_text(wanted)
    log.info("YARN jars resolved into %s", LIB)
    return LIB


def root(home: WeirHome) -> Path:
    return home.root / "yarn"


def conf_dir(home: WeirHome) -> Path:
    """The Hadoop configuration folder: what `HADOOP_CONF_DIR` of a spark-submit names."""
    return root(home) / "conf"


def _state_file(home: WeirHome) -> Path:
    return root(home) / "yarn.json"


def read_state(home: WeirHome) -> YarnState | None:
    path = _state_file(home)
    return YarnState(**json.loads(path.read_text())) if path.is_file() else None


def _alive(pid: int, main_class: str, conf: Path) -> bool:
    """Whether `pid` is this home's daemon (not a recycled pid of another process)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return main_class.encode() in cmdline and any(str(conf).encode() in part for part in cmdline)


def running(home: WeirHome) -> YarnState | None:
    state = read_state(home)
    conf = conf_dir(home)
    if state and _alive(state.rm_pid, RM_MAIN, conf) and _alive(state.nm_pid, NM_MAIN, conf):
        return state
    return None


def _site(properties: dict[str, str]) -> str:
    body = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                   for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def _yarn_site(base: Path, ports: dict[str, int]) -> dict[str, str]:
    rm, nm = "127.0.0.1", "127.0.0.1"
    return {
        "yarn.resourcemanager.hostname": rm,
        "yarn.resourcemanager.bind-host": rm,
        "yarn.resourcemanager.address": f"{rm}:{ports['rm']}",
        "yarn.resourcemanager.scheduler.address": f"{rm}:{ports['rm_scheduler']}",
        "yarn.resourcemanager.resource-tracker.address": f"{rm}:{ports['rm_tracker']}",
        "yarn.resourcemanager.admin.address": f"{rm}:{ports['rm_admin']}",
        "yarn.resourcemanager.webapp.address": f"{rm}:{ports['rm_web']}",
        "yarn.nodemanager.hostname": nm,
        "yarn.nodemanager.bind-host": nm,
        "yarn.nodemanager.address": f"{nm}:{ports['nm']}",
        "yarn.nodemanager.localizer.address": f"{nm}:{ports['nm_localizer']}",
        "yarn.nodemanager.webapp.address": f"{nm}:{ports['nm_web']}",
        "yarn.nodemanager.collector-service.address": f"{nm}:{ports['nm_collector']}",
        "yarn.nodemanager.resource.memory-mb": str(NM_MEMORY_MB),
        "yarn.nodemanager.resource.cpu-vcores": str(NM_VCORES),
        "yarn.scheduler.minimum-allocation-mb": "256",
        "yarn.scheduler.maximum-allocation-mb": str(NM_MEMORY_MB),
        "yarn.scheduler.maximum-allocation-vcores": str(NM_VCORES),
        # Python workers and JVM reservations make virtual memory meaningless here.
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.pmem-check-enabled": "false",
        # A shared development disk that is fuller than Hadoop's 90 % must not mark the node bad.
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
        "yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb": "512",
        "yarn.nodemanager.local-dirs": str(base / "nm-local"),
        "yarn.nodemanager.log-dirs": str(base / "nm-logs"),
        "yarn.nodemanager.recovery.enabled": "false",
        "yarn.resourcemanager.recovery.enabled": "false",
        "yarn.nodemanager.delete.debug-delay-sec": "600",
        # The node reports quickly, so a killed container is seen within a second or two.
        "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "500",
        "yarn.log-aggregation-enable": "false",
        "yarn.timeline-service.enabled": "false",
    }


def _capacity_scheduler() -> dict[str, str]:
    # One queue, and Spark's cluster-mode driver is the application master: AMs may use it all
    # (the default 10 % would leave a 4 GB node's drivers waiting in ACCEPTED).
    return {
        "yarn.scheduler.capacity.root.queues": "default",
        "yarn.scheduler.capacity.root.default.capacity": "100",
        "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
        "yarn.scheduler.capacity.maximum-am-resource-percent": "1.0",
        "yarn.scheduler.capacity.maximum-applications": "100",
    }


LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.metrics2=WARN
log4j.logger.org.apache.hadoop.ipc=WARN
log4j.logger.org.eclipse.jetty=WARN
"""


def _write_conf(home: WeirHome, ports: dict[str, int]) -> Path:
    base, conf = root(home), conf_dir(home)
    conf.mkdir(parents=True, exist_ok=True)
    (base / "tmp").mkdir(parents=True, exist_ok=True)
    (conf / "yarn-site.xml").write_text(_site(_yarn_site(base, ports)))
    (conf / "core-site.xml").write_text(_site({
        "fs.defaultFS": "file:///", "hadoop.tmp.dir": str(base / "tmp")}))
    (conf / "capacity-scheduler.xml").write_text(_site(_capacity_scheduler()))
    (conf / "log4j.properties").write_text(LOG4J)
    return conf


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not java:
        raise YarnError("no java found (set JAVA_HOME)")
    return str(java)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _since(path: Path, offset: int) -> str:
    """What `path` gained after its first `offset` bytes (the log is kept across restarts)."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(offset)
            return log_file.read().decode(errors="replace")
    except OSError:
        return ""


def _daemon(home: WeirHome, name: str, main_class: str) -> subprocess.Popen[bytes]:
    conf = conf_dir(home)
    if not any(LIB.glob("hadoop-yarn-server-nodemanager-*.jar")):
        raise YarnError(f"YARN not installed ({LIB} empty): run `infra/yarn/yarn.sh install`")
    log_file = home.logs / f"yarn-{name}.log"
    # The configuration folder first on the class path: that is how Hadoop finds yarn-site.xml.
    command = [_java(), f"-Xmx{HEAP}", "-Xms64m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
               *ADD_OPENS, f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
               f"-Dhadoop.log.dir={home.logs}", f"-Dyarn.log.dir={home.logs}",
               f"-Dhadoop.home.dir={root(home)}",
               "-cp", f"{conf}{os.pathsep}{LIB / '*'}", main_class]
    env = {**os.environ, "HADOOP_CONF_DIR": str(conf), "YARN_CONF_DIR": str(conf)}
    with open(log_file, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=root(home), start_new_session=True)


def rest(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read().decode())


def _nodes_running(rm_url: str) -> bool:
    try:
        nodes = rest(f"{rm_url}/ws/v1/cluster/nodes", 2.0).get("nodes") or {}
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return any(node.get("state") == "RUNNING" for node in nodes.get("node") or [])


PORT_NAMES = ("rm", "rm_scheduler", "rm_tracker", "rm_admin", "rm_web", "nm", "nm_localizer",
              "nm_web", "nm_collector")
BIND_ATTEMPTS = 3


class _PortTaken(YarnError):
    """A daemon could not bind one of its ports: another process took it after the look-up."""


def _ports(kept: dict[str, int]) -> dict[str, int]:
    """The ports `kept` from a previous start, the missing ones drawn together (so distinct), and
    the ResourceManager's web port pinned by `WEIR_YARN_RM_WEB_PORT` when set."""
    ports = {name: kept[name] for name in PORT_NAMES if kept.get(name)}
    missing = [name for name in PORT_NAMES if name not in ports]
    ports.update(zip(missing, free_ports(len(missing)), strict=True))
    if os.environ.get("WEIR_YARN_RM_WEB_PORT"):
        ports["rm_web"] = int(os.environ["WEIR_YARN_RM_WEB_PORT"])
    return ports


def start(home: WeirHome, timeout_s: float = READY_TIMEOUT_S) -> YarnState:
    """Start the ResourceManager and NodeManager of `home` unless they run; return once the
    NodeManager has registered as RUNNING. The ports of the previous start are kept (clients
    configured against them keep working); when one of them, or a new one, was taken by another
    process meanwhile, all are drawn anew, up to `BIND_ATTEMPTS` times."""
    current = running(home)
    if current:
        return current
    stop(home)  # a half-running pair from before
    previous = read_state(home)
    kept = dict(previous.ports) if previous else {}
    for attempt in range(1, BIND_ATTEMPTS + 1):
        try:
            return _start(home, _ports(kept), timeout_s)
        except _PortTaken as taken:
            if attempt == BIND_ATTEMPTS:
                raise YarnError(f"no free ports after {attempt} attempts: {taken}") from taken
            log.warning("a port was taken before YARN bound it; drawing new ports: %s",
                        str(taken).splitlines()[0])
            kept = {}


def _start(home: WeirHome, ports: dict[str, int], timeout_s: float) -> YarnState:
    home.logs.mkdir(parents=True, exist_ok=True)
    conf = _write_conf(home, ports)
    logs = {name: home.logs / f"yarn-{name}.log" for name in ("resourcemanager", "nodemanager")}
    offsets = {name: path.stat().st_size if path.is_file() else 0 for name, path in logs.items()}
    rm = _daemon(home, "resourcemanager", RM_MAIN)
    nm = _daemon(home, "nodemanager", NM_MAIN)
    rm_url = f"http://127.0.0.1:{ports['rm_web']}"
    conn = json.dumps({"conn_type": "spark", "host": "yarn",
                       "extra": {"deploy-mode": "cluster", "queue": "default"}})
    state = YarnState(rm.pid, nm.pid, ports, rm_url, str(conf), conn, time.time())
    _state_file(home).write_text(json.dumps(asdict(state), indent=2))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, process in (("resourcemanager", rm), ("nodemanager", nm)):
            if process.poll() is not None:
                stop(home)
                message = f"{name} exited with {process.returncode}; see {logs[name]}:\n{_tail(logs[name])}"
                if "java.net.BindException" in _since(logs[name], offsets[name]):
                    raise _PortTaken(message)
                raise YarnError(message)
        if _nodes_running(rm_url):
            log.info("YARN running: RM pid %d at %s, NM pid %d", rm.pid, rm_url, nm.pid)
            return state
        time.sleep(1.0)
    stop(home)
    raise YarnError(f"no NodeManager RUNNING at {rm_url} within {timeout_s:.0f}s; see "
                    f"{logs['nodemanager']}")


def stop(home: WeirHome, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the NodeManager (its containers with it), then the ResourceManager; SIGKILL after
    `grace_s`. Returns whether anything was running."""
    state = read_state(home)
    if state is None:
        return False
    conf = conf_dir(home)
    was = False
    for pid, main_class in ((state.nm_pid, NM_MAIN), (state.rm_pid, RM_MAIN)):
        if not _alive(pid, main_class, conf):
            continue
        was = True
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _alive(pid, main_class, conf) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid, main_class, conf):
            log.warning("%s %d ignored SIGTERM for %.0fs: killing it", main_class, pid, grace_s)
            os.killpg(pid, signal.SIGKILL)
            while _alive(pid, main_class, conf):
                time.sleep(0.1)
    return was


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="infra/yarn/yarn.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("install", "start", "stop", "status"))
    parser.add_argument("--json", action="store_true", help="print the cluster state as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    home = WeirHome.from_env()
    try:
        if args.action == "install":
            print(f"YARN jars in {install()}")
            return 0
        if args.action == "start":
            state = start(home)
            print(json.dumps(asdict(state)) if args.json else
                  f"yarn running: RM {state.rm_url} (pid {state.rm_pid}), NM pid {state.nm_pid}; "
                  f"HADOOP_CONF_DIR={state.conf_dir}; AIRFLOW_CONN_SPARK_DEFAULT='{state.airflow_conn_spark_default}'")
            return 0
        if args.action == "stop":
            print("yarn stopped" if stop(home) else "yarn was not running")
            return 0
        state = running(home)
        if args.json:
            print(json.dumps({"running": state is not None, **(asdict(state) if state else {})}))
        else:
            print(f"yarn running: RM {state.rm_url}" if state else "yarn not running")
        return 0 if state else NOT_RUNNING
    except (YarnError, subprocess.CalledProcessError) as err:
        print(f"yarn {args.action}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
