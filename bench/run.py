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
import signal
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
# In the order they run: what the goals need first, so that a run cut short by its time budget
# (or a loaded machine) still has the baselines and the headline ratios.
NAMES = ("ceiling", "bare", "platform_silver", "latency", "platform_gold", "backfill", "recovery",
         "dq", "dag_parse", "scaling", "profile", "kafka")
# --only X also runs what X's ratios are taken against (the latency rate is half of the
# platform's sustained rate measured in the same run).
NEEDS = {"latency": ("platform_silver",)}
SMALL_IN_SUITE = ("dq",)
# Contributed measurements that need longer than the profile's limit (kafka: two sources, each
# run twice, plus its own broker), still within what is left of the run's budget.
# A full recovery run (3 kills, backoff 2+4+8 s, a JVM start each) takes ~6 minutes on 2 cores.
CONTRIBUTED_TIMEOUT_S = {"kafka": 420.0, "recovery": 480.0}


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


FULL = Profile(base=Size(files=8, sessions_per_file=40), warmup=Size(files=2, sessions_per_file=10),
               multipliers=(1, 4, 16), files_per_trigger=2, repeats_cheap=3, repeats_stream=1,
               latency_duration_s=45, latency_settle_s=10, scale_cores=True, worker_timeout_s=420,
               contributed_timeout_s=300, budget_s=1080, one_worker=False)
# Production volume: ~1M lines (20 files of ~12 MB) as one backlog; the platform's batches are
# bounded by bytes (the catalog default, 64 MB), the bare job reads as Spark's text source does.
VOLUME = Profile(base=Size(files=20, sessions_per_file=4650), warmup=Size(files=2, sessions_per_file=10),
                 multipliers=(1,), files_per_trigger=0, repeats_cheap=1, repeats_stream=1,
                 latency_duration_s=45, latency_settle_s=10, scale_cores=False, worker_timeout_s=1500,
                 contributed_timeout_s=600, budget_s=3600, one_worker=False)
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
    load_samples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

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

    def sample_load(self, before: str) -> None:
        """Record the load average just before a worker starts, when none of the run's own
        processes is running (for reference: the 1-minute average still carries a decaying share
        of the previous worker)."""
        self.load_samples.append({"before": before, "at_s": round(time.monotonic() - self.started, 1),
                                  "load_average": [round(x, 2) for x in os.getloadavg()]})

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
    suite.sample_load(labels)
    started = time.monotonic()
    logfile = suite.workdir / f"worker-{specs[0].label}.log"
    reason = ""
    with logfile.open("w") as log_handle:
        worker = subprocess.Popen([sys.executable, "-m", "bench.workloads", str(request), str(out)],
                                  cwd=REPO_ROOT, stdout=log_handle, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            code = worker.wait(timeout=timeout)
            if code != 0:
                reason = f"worker exited {code} (log: {logfile})"
        except subprocess.TimeoutExpired:
            reason = f"did not finish within {timeout:.0f}s"
        finally:
            if worker.poll() is None:       # timed out or interrupted: the worker and its JVM
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    log.info("worker (%s) done in %.0fs%s", labels, time.monotonic() - started,
             f": {reason}" if reason else "")
    done = {r["label"]: r for r in json.loads(out.read_text())} if out.is_file() else {}
    return [done.get(s.label) or {"label": s.label, "not_measured": reason or "no result"}
            for s in specs]


def spark_specs(suite: Suite, name: str) -> list[tuple[str, list[Spec]]]:
    """(master, specs of one worker) for the Spark measurement `name`."""
    p = suite.profile
    if name == "ceiling":
        return [("local[2]", [suite.spec("ceiling", "ceiling", repeats=p.repeats_cheap),
                              suite.spec("ceiling_transforms", "ceiling_transforms",
                                         repeats=p.repeats_cheap)])]
    if name in ("bare", "platform_silver"):
        return [("local[2]", [suite.spec(name, name, repeats=p.repeats_stream)])]
    if name in ("platform_gold", "backfill"):
        return [("local[2]", [suite.spec(name, name)])]
    if name == "scaling":
        groups = []
        for m in p.multipliers:
            if m != 1:
                groups += [("local[2]", [suite.spec("platform_silver", f"scale_platform_x{m}",
                                                    multiplier=m)]),
                           ("local[2]", [suite.spec("bare", f"scale_bare_x{m}", multiplier=m)])]
        if p.scale_cores:
            groups += [("local[1]", [suite.spec("platform_silver", "scale_platform_local1")]),
                       ("local[1]", [suite.spec("bare", "scale_bare_local1")])]
        return groups
    if name == "profile":
        return [("local[2]", [suite.spec("ingest_profile", "ingest_profile", multiplier=4)])]
    if name == "latency":
        silver = suite.results.get("platform_silver", {})
        rate = silver.get("sustained_events_per_s") or silver.get("events_per_s")
        if not rate:
            return []
        spec = suite.spec("latency", "latency", rate=round(rate / 2, 1), trigger="1 second",
                          duration_s=p.latency_duration_s, settle_s=p.latency_settle_s)
        return [("local[2]", [dataclasses.replace(spec, warmup=None)])]
    return []


def run_spark(suite: Suite, name: str) -> None:
    if suite.remaining_s() < 30:
        suite.results[name] = {"label": name, "not_measured": "time budget of the run spent"}
        return
    if name == "latency" and not spark_specs(suite, name):
        suite.results["latency"] = {"label": "latency", "not_measured":
                                    "no platform landing → silver rate measured in this run"}
        return
    for master, specs in spark_specs(suite, name):
        for result in run_worker(suite, master, specs):
            suite.results[result["label"]] = result


def run_contributed(suite: Suite, name: str) -> None:
    if name == "dag_parse":
        suite.results["dag_parse"] = contributed.dag_parse_times(repeats=1 if suite.quick else 3)
        return
    reason = contributed.missing_reason(name)
    if reason or suite.quick:
        suite.results[name] = {"not_measured": reason or "--quick skips the contributed benchmarks"}
        return
    limit = max(suite.profile.contributed_timeout_s, CONTRIBUTED_TIMEOUT_S.get(name, 0.0))
    timeout = min(limit, suite.remaining_s())
    if timeout < 30:
        suite.results[name] = {"not_measured": "time budget of the run spent"}
        return
    # The full DQ day (1M rows streamed first) takes longer than the whole suite's budget: the
    # suite runs it at its quick size, and says so.
    quick = name in SMALL_IN_SUITE
    log.info("contributed benchmark %s%s", name, " (quick size)" if quick else "")
    suite.sample_load(name)
    result = contributed.run_contributed(name, suite.workdir / name, quick=quick, timeout_s=timeout)
    suite.results[name] = {**result, "run_quick": quick}


def run_all(suite: Suite) -> None:
    """Every selected measurement in `NAMES` order; with `one_worker`, the Spark ones (but latency,
    which needs the platform's rate) share a single worker."""
    order = [n for n in NAMES if n in suite.selected]
    if suite.profile.one_worker:
        specs = [s for n in order if n != "latency" for _, group in spark_specs(suite, n) for s in group]
        if specs:
            for result in run_worker(suite, "local[2]", specs):
                suite.results[result["label"]] = result
        order = [n for n in order if n == "latency" or n in contributed.MODULES or n == "dag_parse"]
    for name in order:
        if name in contributed.MODULES or name == "dag_parse":
            run_contributed(suite, name)
        else:
            run_spark(suite, name)


def environment() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"host_cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": platform.python_version(), "platform": platform.platform(), "git_commit": commit}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny data, one JVM (smoke run)")
    parser.add_argument("--volume", action="store_true",
                        help="production volume: ~1M lines as one backlog (use with --only)")
    parser.add_argument("--only", action="append", choices=NAMES, metavar="NAME",
                        help=f"run only these measurements (repeatable): {', '.join(NAMES)}")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default bench/results; bench/results/tmp/quick with --quick)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="time budget of the measurements (default 1080, or 240 with --quick)")
    parser.add_argument("--worker-timeout-s", type=float, default=None,
                        help="time limit per Spark measurement (default 420, or 240 with --quick)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the whole work folder (datasets and homes too, not only the logs)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = (args.out or (RESULTS / "tmp" / "quick" if args.quick else RESULTS)).absolute()
    selected = list(args.only or NAMES)
    for name in list(selected):
        selected += [n for n in NEEDS.get(name, ()) if n not in selected]
    profile = QUICK if args.quick else VOLUME if args.volume else FULL
    if args.budget_s:
        profile = dataclasses.replace(profile, budget_s=args.budget_s)
    if args.worker_timeout_s:
        profile = dataclasses.replace(profile, worker_timeout_s=args.worker_timeout_s)
    workdir = out / "tmp" / f"run-{os.getpid()}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    suite = Suite(profile=profile, quick=args.quick, workdir=workdir,
                  selected=tuple(n for n in NAMES if n in selected))
    started_at = dt.datetime.now(dt.UTC)
    env_before = environment()  # the machine's load before the run: what "loaded" is judged on
    try:
        run_all(suite)
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
        # `load_average` is sampled before the run; the one after it (and those between workers)
        # include the harness's own workers, so they are kept for reference only.
        "environment": {**env_before, "load_average_after": env_after["load_average"],
                        "load_average_between_workers": suite.load_samples},
        "datasets": {k: dataclasses.asdict(v) for k, v in suite.datasets.items()},
        "selected": list(suite.selected),
        "results": suite.results,
    }
    document["summary"] = report.summarise(document)
    paths = report.write(document, out, stem=started_at.date().isoformat())
    if not args.keep:               # the worker logs stay (git ignores bench/results/tmp)
        for bulky in ("data", "homes", *contributed.MODULES):
            shutil.rmtree(workdir / bulky, ignore_errors=True)
    for path in paths:
        log.info("wrote %s", path)
    sys.stdout.write(report.markdown_summary(document) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
