"""`python -m bench.worker WORKLOAD ARGS_JSON`: one measured run in a process of its own, the only
protocol between the harness and a measurement. It prints exactly one JSON line on stdout, the
result (with `label`, and `error` when the run failed); logs go to stderr.

WORKLOAD is one of `bench.workloads` (ARGS_JSON: a `Spec`), `recovery` or `dq` (the
measurement modules of the same names; ARGS_JSON: {"label", "workdir", "quick"}), or `dag_parse`
(ARGS_JSON: {"label", "repeats"}).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import dag_parse, workloads

log = logging.getLogger("bench.worker")
# Measurements that own their set-up (broker, Airflow, data) behind `measure(quick=, workdir=)`.
MODULES = {"recovery": "bench.recovery", "dq": "bench.dq_cost"}
NAMES = (*workloads.SPARK_WORKLOADS, *workloads.PROCESS_WORKLOADS, *MODULES, "dag_parse")


def run(workload: str, args: dict[str, Any]) -> dict[str, Any]:
    """The result of one run of `workload` with `args`."""
    if workload == "dag_parse":
        return dag_parse.dag_parse_times(repeats=int(args.get("repeats", 3)))
    if workload in MODULES:
        module = importlib.import_module(MODULES[workload])
        return dict(module.measure(quick=bool(args.get("quick")), workdir=Path(args["workdir"])))
    spec = workloads.Spec.from_json(json.dumps(args))
    if workload in workloads.PROCESS_WORKLOADS:
        return workloads.measure(spec, None)
    from spark_jobs.session import build_session

    started = time.monotonic()
    spark = build_session(f"weir-bench-{spec.label}", master=workloads.MASTER,
                          conf=workloads.session_conf())
    try:
        return {**workloads.measure(spec, spark), "jvm_startup_s": round(time.monotonic() - started, 1)}
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=NAMES)
    parser.add_argument("args", type=json.loads, help="the run's arguments as one JSON object")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    label = str(options.args.get("label", options.workload))
    try:
        result = {"label": label, "workload": options.workload, **run(options.workload, options.args)}
    except Exception as err:  # the harness records why there is no number, never a number
        log.exception("%s failed", label)
        result = {"label": label, "workload": options.workload,
                  "error": f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}"}
    result["worker_pid"] = os.getpid()
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
