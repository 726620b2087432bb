"""A Spark standalone cluster (one master, one worker) from the installed pyspark, on 127.0.0.1.

    python infra/spark/standalone.py start [--cores 2] [--memory 2g] [--json]
    python infra/spark/standalone.py stop
    python infra/spark/standalone.py status

State (pids, ports, master URL) and logs live in `WEIR_HOME/spark/`. Point Weir at the cluster with
the Airflow connection `spark_default` = `{"conn_type": "spark", "host": "spark://127.0.0.1", "port": P}`
(`start` prints it). Ports are picked free at start, so it never collides with another cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from spark_jobs.home import WeirHome  # noqa: E402
from spark_jobs.ports import free_ports  # noqa: E402


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def folder() -> Path:
    path = WeirHome.from_env().root / "spark"
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_path() -> Path:
    return folder() / "standalone.json"


def wait_port(port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


def launch(name: str, args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    log = open(folder() / f"{name}.log", "ab")
    return subprocess.Popen([str(spark_class()), *args], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def start(cores: int, memory: str, timeout_s: float = 180.0) -> dict[str, object]:
    if state_path().exists():
        stop()
    port, ui, worker_ui = free_ports(3)
    master = launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)])
    url = f"spark://127.0.0.1:{port}"
    state: dict[str, object] = {"master_url": url, "master_pid": master.pid, "master_port": port,
                                "master_ui": f"http://127.0.0.1:{ui}"}
    state_path().write_text(json.dumps(state))
    if not wait_port(port, timeout_s):
        stop()
        raise SystemExit(f"the master did not open port {port}; see {folder() / 'master.log'}")
    work = folder() / "work"
    work.mkdir(exist_ok=True)
    worker = launch("worker", ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                               "--cores", str(cores), "--memory", memory, "--webui-port", str(worker_ui),
                               "--work-dir", str(work)])
    state.update(worker_pid=worker.pid, worker_ui=f"http://127.0.0.1:{worker_ui}")
    state_path().write_text(json.dumps(state))
    deadline = time.monotonic() + timeout_s
    log = folder() / "master.log"
    while "Registering worker" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline or worker.poll() is not None:
            stop()
            raise SystemExit(f"the worker did not register; see {folder() / 'worker.log'}")
        time.sleep(0.5)
    state["airflow_conn_spark_default"] = json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": port})
    state_path().write_text(json.dumps(state))
    return state


def stop() -> None:
    try:
        state = json.loads(state_path().read_text())
    except FileNotFoundError:
        return
    for key in ("worker_pid", "master_pid"):
        pid = state.get(key)
        if not isinstance(pid, int):
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            for _ in range(40):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.25)
    state_path().unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--memory", default="2g")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.action == "start":
        state = start(args.cores, args.memory)
        print(json.dumps(state) if args.json else
              f"master {state['master_url']} (UI {state['master_ui']}); "
              f"AIRFLOW_CONN_SPARK_DEFAULT='{state['airflow_conn_spark_default']}'")
    elif args.action == "stop":
        stop()
        print("stopped")
    else:
        print(state_path().read_text() if state_path().exists() else "not running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
