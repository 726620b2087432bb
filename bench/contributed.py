"""Measurements the harness does not own: recovery (`bench/recovery.py`), data-quality cost
(`bench/dq_cost.py`), Kafka throughput (`bench/kafka_throughput.py`), and the parse time of each
DAG file.

The contract with those modules: a function `measure(*, quick: bool = False, workdir: Path) ->
dict` returning JSON-serialisable numbers (keys below). The harness runs it in a fresh process
(`python -m bench.contributed NAME WORKDIR OUT [--quick]`) with a time limit; a module that is
absent, fails or times out is recorded as "not measured: <why>", never as a number.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_jobs.home import REPO_ROOT

log = logging.getLogger(__name__)
MODULES = {
    "recovery": "bench.recovery",
    "dq": "bench.dq_cost",
    "kafka": "bench.kafka_throughput",
}
# The keys each module is asked to return (the first of each tuple is the agreed name; the others
# are accepted so that a near miss is still read rather than dropped).
KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "recovery": {"detection_s": ("detection_s", "time_to_detection_s"),
                 "first_commit_s": ("first_commit_s", "successor_first_commit_s", "recovery_s",
                                    "total_s")},
    "dq": {"seconds_per_million_rows": ("seconds_per_million_rows", "s_per_million_rows",
                                        "validation_s_per_million_rows"),
           "dq_vs_stream": ("ratio", "dq_vs_stream")},
    "kafka": {"events_per_s": ("events_per_s", "sustained_events_per_s", "throughput_events_per_s")},
}


def missing_reason(name: str) -> str | None:
    """Why module `name` cannot be measured before running anything, or None."""
    spec = importlib.util.find_spec(MODULES[name])
    if spec is None or spec.origin is None:
        return f"{MODULES[name].replace('.', '/')}.py is not in the checkout yet"
    if "def measure(" not in Path(spec.origin).read_text():
        return f"{MODULES[name]} has no measure(*, quick, workdir) function"
    return None


def headline(name: str, result: dict[str, Any]) -> dict[str, float | None]:
    """The agreed keys of a module's result, read under any of their accepted names."""
    out: dict[str, float | None] = {}
    for key, aliases in KEYS[name].items():
        value = next((result[a] for a in aliases if isinstance(result.get(a), int | float)), None)
        out[key] = float(value) if value is not None else None
    return out


def run_contributed(name: str, workdir: Path, *, quick: bool, timeout_s: float) -> dict[str, Any]:
    """Run module `name`'s `measure` in a fresh process; a dict with either its numbers or
    `not_measured` saying why."""
    reason = missing_reason(name)
    if reason:
        return {"not_measured": reason}
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{name}.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "bench.contributed", name, str(workdir), str(out)]
    if quick:
        command.append("--quick")
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"not_measured": f"{MODULES[name]}.measure did not finish within {timeout_s:.0f}s"}
    elapsed = time.monotonic() - started
    if done.returncode != 0 or not out.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"not_measured": f"{MODULES[name]}.measure failed (exit {done.returncode}): {last}"}
    result = json.loads(out.read_text())
    if "not_measured" in result and len(result) == 1:
        return result
    return {"result": result, **headline(name, result), "wall_s": round(elapsed, 1)}


def dag_parse_times(repeats: int = 3, timeout_s: float = 60.0) -> dict[str, Any]:
    """Seconds to `import dags.<file>` in a fresh interpreter, for each DAG file (best of
    `repeats`), with `plugins/` on the path as Airflow puts it. The DAG processor has Airflow
    loaded already, so `net_s` subtracts a fresh interpreter importing `airflow.sdk`."""
    files = sorted(p for p in (REPO_ROOT / "dags").glob("*.py") if not p.name.startswith("_"))
    if not files:
        return {"not_measured": "no DAG files in dags/ yet"}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT / "plugins"), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}

    def best_of(code: str) -> tuple[float | None, str]:
        times, error = [], ""
        for _ in range(repeats):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                                  text=True, timeout=timeout_s, env=env)
            if done.returncode != 0:
                error = (done.stderr.strip().splitlines() or ["import failed"])[-1][:200]
                return None, error
            times.append(time.monotonic() - started)
        return min(times), error

    interpreter, _ = best_of("pass")
    airflow, airflow_error = best_of("import airflow.sdk")
    baseline = airflow if airflow is not None else interpreter or 0.0
    per_file: dict[str, Any] = {}
    for path in files:
        seconds, error = best_of(f"import dags.{path.stem}")
        per_file[path.name] = ({"seconds": round(seconds, 3), "net_s": round(seconds - baseline, 3)}
                               if seconds is not None else {"error": error})
    nets = [v["net_s"] for v in per_file.values() if "net_s" in v]
    return {"interpreter_s": round(interpreter or 0.0, 3),
            "airflow_import_s": round(airflow, 3) if airflow is not None else None,
            "airflow_import_error": airflow_error or None, "files": per_file,
            "max_net_s": max(nets) if nets else None,
            "median_net_s": statistics.median(nets) if nets else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contributed", description=__doc__)
    parser.add_argument("name", choices=sorted(MODULES))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = importlib.import_module(MODULES[args.name])
    measure = getattr(module, "measure", None)
    if measure is None:
        result = {"not_measured": f"{MODULES[args.name]} has no measure(*, quick, workdir) function"}
    else:
        result = measure(quick=args.quick, workdir=args.workdir)
    args.out.write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
