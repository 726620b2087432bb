"""`python -m bench.run` (`make bench`): the benchmark suite, every baseline side by side in one
invocation on the same input, written to `bench/results/<date>.json`, `<date>.md` and PNG plots.

    python -m bench.run                 # the full suite (about 15 minutes on 2 idle cores)
    python -m bench.run --quick         # tiny data, one JVM: the smoke run `make test` uses
    python -m bench.run --only bare --only platform_silver

Each Spark measurement runs in a fresh worker process (`bench.workloads`) so that JVM state never
leaks between baselines; `--quick` runs them all in one worker to save JVM start-ups. Ratios are
always taken against baselines measured in the same run. A measurement that cannot run (missing
module, failure, time budget spent) is recorded as "not measured: <why>", never as a number.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import contributed, report
from bench.datasets import Dataset, Size, make
from bench.workloads import Spec
from spark_jobs.home import REPO_ROOT

log = logging.getLogger("bench.run")
RESULTS = REPO_ROOT / "bench" / "results"
NAMES = ("ceiling", "bare", "platform_silver", "platform_gold", "latency", "backfill", "scaling",
         "recovery", "dq", "kafka", "dag_parse")
SPARK_NAMES = NAMES[:7]
# --only X also runs what X's ratios are taken against (the latency rate is half of the
# platform's sustained rate measured in the same run).
NEEDS = {"latency": ("platform_silver",)}


@dataclass(frozen=True)
class Profile:
    """Sizes and limits of a suite run."""

    base: Size                       # the 1x input
    warmup: Size
    multipliers: tuple[int, ...]     # input growth for the scaling plot
    files_per_trigger: int
    repeats_cheap: int               # batch ceilings
    repeats_stream: int              # streaming runs
    latency_duration_s: float
    latency_settle_s: float
    scale_cores: bool                # also run local[1]
    worker_timeout_s: float
    contributed_timeout_s: float
    budget_s: float
    one_worker: bool


FULL = Profile(base=Size(files=12, sessions_per_file=60), warmup=Size(files=2, sessions_per_file=10),
               multipliers=(1, 4, 16), files_per_trigger=3, repeats_cheap=3, repeats_stream=1,
               latency_duration_s=45, latency_settle_s=10, scale_cores=True, worker_timeout_s=420,
               contributed_timeout_s=240, budget_s=1200, one_worker=False)
QUICK = Profile(base=Size(files=2, sessions_per_file=6), warmup=Size(files=1, sessions_per_file=2),
                multipliers=(1, 2), files_per_trigger=1, repeats_cheap=1, repeats_stream=1,
                latency_duration_s=3, latency_settle_s=1, scale_cores=False, worker_timeout_s=240,
                contributed_timeout_s=60, budget_s=240, one_worker=True)


@dataclass
class Suite:
    """One invocation: its profile, work folder, datasets and what it has measured so far."""

    profile: Profile
    quick: bool
    workdir: Path
    selected: tuple[str, ...]
    started: float = dataclasses.field(default_factory=time.monotonic)
    datasets: dict[str, Dataset] = dataclasses.field(default_factory=dict)
    results: dict[str, Any] = dataclasses.field(default_factory=dict)

    def remaining_s(self) -> float:
        return self.profile.budget_s - (time.monotonic() - self.started)

    def dataset(self, multiplier: int) -> Dataset:
        name = f"x{multiplier}"
        if name not in self.datasets:
            base = self.profile.base
            # Growth by file size: the same files and batches, each `multiplier` times larger.
            self.datasets[name] = make(self.workdir / "data", name,
                                       Size(base.files, base.sessions_per_file * multiplier), seed=11)
        return self.datasets[name]

    def warmup(self) -> Dataset:
        if "warmup" not in self.datasets:
            self.datasets["warmup"] = make(self.workdir / "data", "warmup", self.profile.warmup, seed=3)
        return self.datasets["warmup"]

    def spec(self, workload: str, label: str, *, multiplier: int = 1, repeats: int = 1,
             **params: Any) -> Spec:
        return Spec(workload=workload, label=label, dataset=self.dataset(multiplier),
                    workdir=str(self.workdir / "homes"),
                    warmup=None if self.quick else self.warmup(), repeats=repeats,
                    files_per_trigger=self.profile.files_per_trigger, params=params)


def run_worker(suite: Suite, master: str, specs: list[Spec]) -> list[dict[str, Any]]:
    """Run `specs` in one fresh worker process; a result (or the reason there is none) per spec."""
    labels = ", ".join(s.label for s in specs)
    timeout = min(suite.profile.worker_timeout_s * len(specs), max(suite.remaining_s(), 0.0))
    if timeout < 30:
        return [{"label": s.label, "not_measured": "time budget of the run spent"} for s in specs]
    request = suite.workdir / f"request-{specs[0].label}.json"
    out = suite.workdir / f"result-{specs[0].label}.json"
    out.unlink(missing_ok=True)
    request.write_text(json.dumps({"master": master, "specs": [s.to_dict() for s in specs]}))
    log.info("worker (%s): %s", master, labels)
    started = time.monotonic()
    logfile = suite.workdir / f"worker-{specs[0].label}.log"
    reason = ""
    with logfile.open("w") as log_handle:
        worker = subprocess.Popen([sys.executable, "-m", "bench.workloads", str(request), str(out)],
                                  cwd=REPO_ROOT, stdout=log_handle, stderr=subprocess.STDOUT)
        try:
            code = worker.wait(timeout=timeout)
            if code != 0:
                reason = f"worker exited {code} (log: {logfile})"
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            reason = f"did not finish within {timeout:.0f}s"
    log.info("worker (%s) done in %.0fs%s", labels, time.monotonic() - started,
             f": {reason}" if reason else "")
    done = {r["label"]: r for r in json.loads(out.read_text())} if out.is_file() else {}
    return [done.get(s.label) or {"label": s.label, "not_measured": reason or "no result"}
            for s in specs]


def spark_plan(suite: Suite) -> list[tuple[str, list[Spec]]]:
    """(master, specs of one worker) in the order they run: baselines first, then what depends
    on them. Latency is planned later, once the platform's sustained rate is known."""
    p, chosen = suite.profile, set(suite.selected)
    groups: list[tuple[str, list[Spec]]] = []
    if "ceiling" in chosen:
        groups.append(("local[2]", [suite.spec("ceiling", "ceiling", repeats=p.repeats_cheap),
                                    suite.spec("ceiling_transforms", "ceiling_transforms",
                                               repeats=p.repeats_cheap)]))
    if "bare" in chosen:
        groups.append(("local[2]", [suite.spec("bare", "bare", repeats=p.repeats_stream)]))
    if "platform_silver" in chosen:
        groups.append(("local[2]", [suite.spec("platform_silver", "platform_silver",
                                               repeats=p.repeats_stream)]))
    if "platform_gold" in chosen:
        groups.append(("local[2]", [suite.spec("platform_gold", "platform_gold")]))
    if "backfill" in chosen:
        groups.append(("local[2]", [suite.spec("backfill", "backfill")]))
    if "scaling" in chosen:
        for m in p.multipliers:
            if m != 1:
                groups.append(("local[2]", [suite.spec("platform_silver", f"scale_platform_x{m}",
                                                       multiplier=m),
                                            ]))
                groups.append(("local[2]", [suite.spec("bare", f"scale_bare_x{m}", multiplier=m)]))
        if p.scale_cores:
            groups.append(("local[1]", [suite.spec("platform_silver", "scale_platform_local1")]))
            groups.append(("local[1]", [suite.spec("bare", "scale_bare_local1")]))
    return groups


def run_spark(suite: Suite) -> None:
    groups = spark_plan(suite)
    if suite.profile.one_worker:
        groups = [("local[2]", [s for _, specs in groups for s in specs])] if groups else []
        # The latency run needs the platform's rate: it goes into a second (quick) pass below.
    for master, specs in groups:
        for result in run_worker(suite, master, specs):
            suite.results[result["label"]] = result
    if "latency" in suite.selected:
        silver = suite.results.get("platform_silver", {})
        rate = silver.get("sustained_events_per_s") or silver.get("events_per_s")
        if not rate:
            suite.results["latency"] = {"label": "latency", "not_measured":
                                        "no platform landing → silver rate measured in this run"}
            return
        p = suite.profile
        spec = suite.spec("latency", "latency", rate=round(rate / 2, 1), trigger="1 second",
                          duration_s=p.latency_duration_s, settle_s=p.latency_settle_s)
        suite.results["latency"] = run_worker(suite, "local[2]", [dataclasses.replace(spec, warmup=None)])[0]


def run_others(suite: Suite) -> None:
    for name in ("recovery", "dq", "kafka"):
        if name not in suite.selected:
            continue
        if suite.quick:
            suite.results[name] = {"not_measured": "--quick skips the contributed benchmarks"}
            continue
        timeout = min(suite.profile.contributed_timeout_s, suite.remaining_s())
        if timeout < 30:
            suite.results[name] = {"not_measured": "time budget of the run spent"}
            continue
        log.info("contributed benchmark %s", name)
        suite.results[name] = contributed.run_contributed(name, suite.workdir / name, quick=False,
                                                          timeout_s=timeout)
    if "dag_parse" in suite.selected:
        suite.results["dag_parse"] = contributed.dag_parse_times(repeats=1 if suite.quick else 3)


def environment() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"host_cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": platform.python_version(), "platform": platform.platform(), "git_commit": commit}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny data, one JVM (smoke run)")
    parser.add_argument("--only", action="append", choices=NAMES, metavar="NAME",
                        help=f"run only these measurements (repeatable): {', '.join(NAMES)}")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default bench/results, or bench/results/tmp/quick with --quick)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (datasets, homes, logs)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = (args.out or (RESULTS / "tmp" / "quick" if args.quick else RESULTS)).absolute()
    selected = list(args.only or NAMES)
    for name in list(selected):
        selected += [n for n in NEEDS.get(name, ()) if n not in selected]
    profile = QUICK if args.quick else FULL
    workdir = out / "tmp" / f"run-{os.getpid()}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    suite = Suite(profile=profile, quick=args.quick, workdir=workdir,
                  selected=tuple(n for n in NAMES if n in selected))
    started_at = dt.datetime.now(dt.timezone.utc)
    env_before = environment()
    try:
        run_spark(suite)
        run_others(suite)
    finally:
        if not args.keep:
            shutil.rmtree(workdir / "homes", ignore_errors=True)
    env_after = environment()
    document = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - suite.started, 1),
        "command": " ".join(["python -m bench.run", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick,
        "profile": dataclasses.asdict(profile),
        "environment": {**env_before, "load_average_after": env_after["load_average"]},
        "datasets": {k: dataclasses.asdict(v) for k, v in suite.datasets.items()},
        "selected": list(suite.selected),
        "results": suite.results,
    }
    document["summary"] = report.summarise(document)
    paths = report.write(document, out, stem=started_at.date().isoformat())
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    for path in paths:
        log.info("wrote %s", path)
    sys.stdout.write(report.markdown_summary(document) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
