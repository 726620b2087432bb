"""Seconds to import each DAG file in a fresh interpreter: DAG files must parse in well under a
second and do no I/O at import (DESIGN invariant 5)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

from spark_jobs.home import REPO_ROOT


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
