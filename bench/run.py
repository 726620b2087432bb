"""`python -m bench.run` (`make bench`): Weir at production volume next to Spark's ceiling and a
hand-written job, side by side in one invocation on the same files, written to
`bench/results/<date>.json`, `<date>.md` and PNG plots.

    python -m bench.run                 # ~1M lines: backlog, steady arrival, Kafka, a batch
                                        # against silver of 1M-10M rows, 4M scale point
    python -m bench.run --no-scale      # without the 4M scale point (about half the time)
    python -m bench.run --quick         # tiny data: the smoke run `make test` uses
    python -m bench.run --only ceiling --only bare --only platform
    python -m bench.run --only bare --only platform --pairs 3   # the landing ratios' median of 3 pairs
    python -m bench.run --only one_file # one landing file of ~2.3 GB: the bare job and the platform
    python -m bench.run --only one_line # a file of one 1 GiB line beside the day: the platform
    python -m bench.run --only floor --only ladder --only platform   # the platform's cost, step by step
    python -m bench.run --only platform --jvm-profile  # where the platform driver's CPU goes (JFR)

Every measured run is one process, `python -m bench.worker WORKLOAD ARGS_JSON`, printing one JSON
result line; the harness samples the peak memory and CPU time of its whole process tree. Ratios
are only taken between runs of the same invocation. A run that cannot run (failure, time limit,
budget spent) is recorded as "not measured: <why>", never as a number.
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

from bench import report, workloads
from bench.datasets import Dataset, Size, make
from bench.kafka_throughput import topic_holding
from bench.process_tree import PeakMemory
from bench.workloads import KAFKA_PIPELINE, LADDER, Spec
from spark_jobs import catalog
from spark_jobs.catalog import KafkaSource
from spark_jobs.home import REPO_ROOT

log = logging.getLogger("bench.run")
RESULTS = REPO_ROOT / "bench" / "results"
# In the order they run: the baselines and the headline ratios first, so that a run cut short by
# its budget still has them. `steady` is bare_steady + platform_steady; `growth` is one micro-batch
# timed against silver at each of the profile's sizes; `scale` is ceiling, bare and platform on the
# 4x input.
DEFAULT = ("ceiling", "bare", "floor", "platform", "steady", "kafka", "growth", "scale")
EXTRA = ("days", "one_file", "one_line", "ladder", "ceiling_transforms", "latency", "backfill", "profile",
         "recovery", "dq", "dag_parse")
NAMES = DEFAULT + EXTRA
# `days`: the base input's size spread over this many days, all waiting when the drivers start
BACKLOG_DAYS = 10
# Measurements that set themselves up (broker, Airflow, their own data): `python -m bench.worker
# NAME '{"workdir": ..., "quick": ...}'`, each with its own time limit.
SELF_CONTAINED_TIMEOUT_S = {"recovery": 600.0, "dq": 600.0}
# The latency runs measure the lines that land this long after the stream started, and those
# before apart (`workloads.measure_latency`).
LATENCY_SETTLE_S = 90
# What a `backfill_at_size` run's result gives its size of history (`backfill_history`).
HISTORY_RUN = ("seconds", "rerun_seconds", "cold_seconds", "lines_read", "steps", "rerun_steps",
               "rerun_changed", "cold_changed")
# The catalog entry's fields the latency run replaces (Python source by field name).
LATENCY_ENTRY = {"derived_in_own_process": "True"}


@dataclass(frozen=True)
class Profile:
    """Sizes and limits of a suite run."""

    base: Size                   # backlog and steady arrival
    scale: Size                  # the scale point: 4x the base, as more files of the same size
    one_file: Size               # generated as files of the base's size, then joined into one
    one_line: int                # `one_line`: bytes of the one line without a break beside the base
    steady_interval_s: float     # steady arrival: one base file every this many seconds
    ceiling_repeats: int
    silver_rows: tuple[int, ...]  # `growth`: the sizes of silver a micro-batch is timed against
    history_days: tuple[int, ...]  # `backfill`: the days of history a day's back-fill is timed among
    run_timeout_s: float         # per measured run
    budget_s: float              # the whole invocation


# ~1M lines (20 files of ~12 MB, 245 MB) and ~4M lines (80 such files). Steady arrival: a 50k-line
# file every 5 s (10k lines/s, above the platform's backlog rate of issue 11, below the bare job's).
VOLUME = Profile(base=Size(files=20, sessions_per_file=4650), scale=Size(files=80, sessions_per_file=4650),
                 one_file=Size(files=172, sessions_per_file=4650),   # one file of ~2.3 GB, ~8.7M lines
                 one_line=1 << 30,
                 steady_interval_s=5.0, ceiling_repeats=3, silver_rows=(1_000_000, 4_000_000, 10_000_000),
                 history_days=(1, 10, 30),
                 run_timeout_s=1800, budget_s=3600)
QUICK = Profile(base=Size(files=2, sessions_per_file=6), scale=Size(files=8, sessions_per_file=6),
                one_file=Size(files=4, sessions_per_file=6), one_line=8 << 20,
                steady_interval_s=1.0, ceiling_repeats=1, silver_rows=(1_000, 3_000), history_days=(1, 3),
                run_timeout_s=300, budget_s=1200)


@dataclass
class Suite:
    """One invocation: its profile, work folder, datasets and what it has measured so far."""

    profile: Profile
    quick: bool
    workdir: Path
    selected: tuple[str, ...]
    jvm_profile: bool = False    # the platform's `weir run --once` drivers recorded (`bench.jvm_profile`)
    pairs: int = 1               # the bare job and the platform on the backlog, taking turns this often
    started: float = dataclasses.field(default_factory=time.monotonic)
    datasets: dict[str, Dataset] = dataclasses.field(default_factory=dict)
    results: dict[str, Any] = dataclasses.field(default_factory=dict)
    load_samples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def remaining_s(self) -> float:
        return self.profile.budget_s - (time.monotonic() - self.started)

    def dataset(self, name: str) -> Dataset:
        """`x1` (the base input), `x4` (the scale point), `one_file` (one large landing file),
        `one_line` (the base input and a file of one line without a break) or `days` (the base
        input's size over `BACKLOG_DAYS` days), generated once per invocation."""
        if name not in self.datasets:
            size, seed = {"x1": (self.profile.base, 11), "x4": (self.profile.scale, 13),
                          "one_file": (self.profile.one_file, 17), "one_line": (self.profile.base, 19),
                          "days": (self.profile.base, 23)}[name]
            self.datasets[name] = make(self.workdir / "data", name, size, seed=seed,
                                       one_file=name == "one_file",
                                       line_bytes=self.profile.one_line if name == "one_line" else 0,
                                       days=BACKLOG_DAYS if name == "days" else 1)
        return self.datasets[name]

    def sample_load(self, before: str) -> None:
        """The load average just before a run starts (it still carries a decaying share of the
        previous run: for reference only)."""
        self.load_samples.append({"before": before, "at_s": round(time.monotonic() - self.started, 1),
                                  "load_average": [round(x, 2) for x in os.getloadavg()]})

    def spec(self, workload: str, label: str, dataset: str = "x1", **params: Any) -> dict[str, Any]:
        """The worker arguments of a `bench.workloads` run."""
        if self.jvm_profile and workload in workloads.PROFILED:
            params["jvm_profile"] = str(self.workdir / f"jfr-{label}")
        spec = Spec(workload=workload, label=label, dataset=self.dataset(dataset),
                    workdir=str(self.workdir / "homes"), timeout_s=self.profile.run_timeout_s,
                    repeats=self.profile.ceiling_repeats if workload.startswith("ceiling") else 1,
                    params=params)
        return json.loads(spec.to_json())


def last_json_line(path: Path) -> dict[str, Any] | None:
    """The worker's result: the last line of its stdout that is a JSON object."""
    for line in reversed(path.read_text(errors="replace").splitlines() if path.is_file() else []):
        if line.startswith("{"):
            try:
                return dict(json.loads(line))
            except json.JSONDecodeError:
                continue
    return None


def run_worker(suite: Suite, workload: str, args: dict[str, Any], limit_s: float | None = None) -> None:
    """One measured run in a fresh `bench.worker` process, its tree's peak memory and CPU time
    sampled; its result (or why there is none) lands in `suite.results[label]`."""
    label = str(args["label"])
    timeout = min(limit_s or suite.profile.run_timeout_s, suite.remaining_s())
    if timeout < 30:
        suite.results[label] = {"label": label, "not_measured": "time budget of the run spent"}
        return
    out, logfile = suite.workdir / f"worker-{label}.out", suite.workdir / f"worker-{label}.log"
    log.info("run %s (%s)", label, workload)
    suite.sample_load(label)
    started = time.monotonic()
    reason = ""
    with out.open("wb") as stdout, logfile.open("wb") as stderr:
        # Spark's Python workers must run this interpreter (pyarrow, the package), not `python3`.
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        worker = subprocess.Popen([sys.executable, "-m", "bench.worker", workload, json.dumps(args)],
                                  cwd=REPO_ROOT, env=env, stdout=stdout, stderr=stderr,
                                  start_new_session=True)
        memory = PeakMemory(worker.pid).start()
        try:
            code = worker.wait(timeout=timeout)
            if code != 0:
                reason = f"worker exited {code} (log: {logfile})"
        except subprocess.TimeoutExpired:
            reason = f"did not finish within {timeout:.0f}s"
        finally:
            if worker.poll() is None:       # timed out or interrupted: the worker and its JVMs
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
            peaks = memory.stop()
    seconds = time.monotonic() - started
    result = last_json_line(out) or {"label": label, "not_measured": reason or f"no result (log: {logfile})"}
    if "error" in result:
        result["not_measured"] = f"{result['error']} (log: {logfile})"
    cpu_s, cpu_timeline = peaks.pop("tree_cpu_s"), peaks.pop("cpu_timeline")
    result.update(memory=peaks, cpu_s=cpu_s, cpu_timeline=cpu_timeline, process_s=round(seconds, 1))
    log.info("run %s done in %.0fs%s", label, seconds, f": {result['not_measured']}"
             if "not_measured" in result else "")
    suite.results[label] = result


def run_one(suite: Suite, name: str) -> None:
    """The runs of the selected measurement `name`."""
    p = suite.profile
    interval = p.steady_interval_s
    if name in ("ceiling", "bare", "floor", "platform", "ceiling_transforms"):
        run_worker(suite, name, suite.spec(name, name))
        if name == "platform" and "bare" in suite.selected:
            # more pairs, each the bare job then the platform: the landing ratios' median
            for pair in range(2, suite.pairs + 1):
                for job in ("bare", "platform"):
                    run_worker(suite, job, suite.spec(job, report.pair_label(job, pair)))
    elif name == "ladder":     # the floor's steps to the platform's micro-batch
        for step in range(1, len(LADDER)):
            run_worker(suite, "ladder", suite.spec("ladder", f"ladder_{step}", step=step))
    elif name == "backfill":    # the day back-filled, then again among days of history
        run_worker(suite, name, suite.spec(name, name, history_days=list(p.history_days)))
        backfill_history(suite, suite.results[name])
    elif name == "steady":
        for job in ("bare", "platform"):
            run_worker(suite, f"{job}_steady", suite.spec(f"{job}_steady", f"{job}_steady",
                                                          interval_s=interval))
    elif name == "scale":
        for job in ("ceiling", "bare", "platform"):
            run_worker(suite, job, suite.spec(job, f"{job}_x4", dataset="x4"))
    elif name == "days":
        # a backlog of several days, as an outage leaves it: the platform writes each day's bronze
        # in files of its own, and a day's back-fill then reads that day's lines only
        for job in ("bare", "platform"):
            run_worker(suite, job, suite.spec(job, f"{job}_days", dataset="days"))
    elif name == "one_line":
        # bounded memory whatever one line holds: the reader keeps its first bytes, and the rest
        # of the day is ingested as ever
        run_worker(suite, "platform", suite.spec("platform", "platform_one_line", dataset="one_line"))
    elif name == "one_file":
        # bounded memory whatever one file holds: the whole file is waiting when the drivers start
        for job in ("bare", "platform"):
            run_worker(suite, job, suite.spec(job, f"{job}_one_file", dataset="one_file"))
    elif name == "kafka":
        # The base input's lines as records on a local broker: the bare Kafka job and the platform
        # read the same records, in micro-batches of the catalog entry's bound.
        source = catalog.load(KAFKA_PIPELINE).source
        assert isinstance(source, KafkaSource)
        try:
            with topic_holding(suite.dataset("x1"), suite.workdir / "kafka", source.topic) as topic:
                for job in ("bare_kafka", "platform_kafka"):
                    run_worker(suite, job, suite.spec(job, job, bootstrap=topic["bootstrap"],
                                                      topic=source.topic,
                                                      max_offsets=source.max_offsets_per_trigger))
                    suite.results[job]["kafka"] = topic
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:   # the broker, publishing
            for job in ("bare_kafka", "platform_kafka"):
                suite.results.setdefault(job, {"label": job, "not_measured": f"Kafka topic: {err}"})
    elif name == "profile":
        run_worker(suite, "ingest_profile", suite.spec("ingest_profile", "ingest_profile"))
    elif name == "growth":
        run_worker(suite, "silver_growth", suite.spec("silver_growth", "silver_growth",
                                                      silver_rows=list(p.silver_rows)))
    elif name == "latency":
        rate = suite.results.get("platform", {}).get("events_per_s")
        if not rate:
            for job in ("bare_latency", "latency"):
                suite.results[job] = {"label": job, "not_measured":
                                      "no platform landing → silver rate measured in this run"}
            return
        # The bare job at the same rate and trigger: what Spark and a Delta append reach here. A
        # running stream's latency, measured once the start is over (the JIT compiling, the
        # second process's JVM and first batches: 35-55 s in 2026-12-02's runs), and apart.
        # The platform as a deployment that puts silver's latency first runs it: gold and the
        # sessions in a niced process of their own.
        for job, entry in (("bare_latency", {}), ("latency", LATENCY_ENTRY)):
            run_worker(suite, job, suite.spec(
                job, job, rate=round(rate / 2, 1), trigger="1 second", entry=entry,
                duration_s=3 if suite.quick else 60, settle_s=1 if suite.quick else LATENCY_SETTLE_S))
    elif name == "dag_parse":
        run_worker(suite, "dag_parse", {"label": "dag_parse", "repeats": 1 if suite.quick else 3})
    else:
        # dq's full day (1M rows streamed first) takes longer than the suite's budget: quick size.
        run_worker(suite, name, {"label": name, "workdir": str(suite.workdir / name),
                                 "quick": suite.quick or name == "dq"},
                   limit_s=SELF_CONTAINED_TIMEOUT_S[name])


def backfill_history(suite: Suite, backfill: dict[str, Any]) -> None:
    """The day's back-fill in each size of history the `backfill` run prepared, each in a fresh
    worker, the sizes taking turns in two rounds of opposite order: the machine's drift during the
    run falls on every size alike (measured one after the other, a slower machine at the end was
    charged to the largest size). Each turn is a result of its own (its peak memory); the sizes'
    means go to `backfill["growth"]` (`workloads.history_point`)."""
    sizes = [{**size, "runs": []} for size in backfill.pop("sizes", [])]
    for turn, order in enumerate((sizes, sizes[::-1]), start=1):
        for size in order:
            label = f"backfill_{size['days']}d_{turn}"
            run_worker(suite, "backfill_at_size", suite.spec("backfill_at_size", label, home=size["home"]))
            if "not_measured" not in suite.results[label]:
                size["runs"].append({k: suite.results[label].get(k) for k in HISTORY_RUN})
    backfill["growth"] = [workloads.history_point(size) for size in sizes if size["runs"]]


def environment() -> dict[str, Any]:
    """The host, and the code measured: HEAD, and the tracked files that differ from it (a run of
    uncommitted code names them, not only a commit it did not run)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout

    changed = sorted(line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines())
    return {"host_cores": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": platform.python_version(), "platform": platform.platform(),
            "git_commit": git("rev-parse", "--short", "HEAD").strip(), "git_changed": changed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny data (smoke run, not a measurement)")
    parser.add_argument("--no-scale", action="store_true", help="skip the 4M-line scale point")
    parser.add_argument("--only", action="append", choices=NAMES, metavar="NAME",
                        help=f"run only these (repeatable): {', '.join(NAMES)}; "
                             f"default: {', '.join(DEFAULT)}")
    parser.add_argument("--steady-interval-s", type=float, default=None,
                        help="steady arrival: seconds between two input files (default 5, or 1 with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default bench/results; bench/results/tmp/quick with --quick)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="time budget of the whole run (default 3600, or 1200 with --quick)")
    parser.add_argument("--jvm-profile", action="store_true",
                        help="record the platform's `weir run --once` drivers with the JDK's Flight "
                             "Recorder and report where their CPU goes (bench.jvm_profile)")
    parser.add_argument("--pairs", type=int, default=1, metavar="N",
                        help="run the bare job and the platform N times each, taking turns; the "
                             "landing goals take the median of the N pairs' ratios (default 1)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the whole work folder (datasets and homes too, not only the logs)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, not {args.pairs}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = (args.out or (RESULTS / "tmp" / "quick" if args.quick else RESULTS)).absolute()
    selected = [n for n in NAMES if n in (args.only or DEFAULT) and not (args.no_scale and n == "scale")]
    if "latency" in selected and "platform" not in selected:   # latency runs at half its rate
        selected.insert(0, "platform")
    profile = QUICK if args.quick else VOLUME
    if args.budget_s:
        profile = dataclasses.replace(profile, budget_s=args.budget_s)
    if args.steady_interval_s:
        profile = dataclasses.replace(profile, steady_interval_s=args.steady_interval_s)
    workdir = out / "tmp" / f"run-{os.getpid()}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    suite = Suite(profile=profile, quick=args.quick, workdir=workdir,
                  selected=tuple(n for n in NAMES if n in selected), jvm_profile=args.jvm_profile,
                  pairs=args.pairs)
    started_at = dt.datetime.now(dt.UTC)
    env_before = environment()  # the machine's load before the run: what "loaded" is judged on
    try:
        for name in suite.selected:
            run_one(suite, name)
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
        # `load_average` is sampled before the run; the one after it (and those between runs)
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
        for bulky in ("data", "homes", "kafka", "recovery", "dq"):
            shutil.rmtree(workdir / bulky, ignore_errors=True)
    for path in paths:
        log.info("wrote %s", path)
    sys.stdout.write(report.markdown_summary(document) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
