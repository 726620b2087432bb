"""Where a driver JVM's CPU goes: a JDK Flight Recorder recording, summarised.

    python -m bench.run --only platform --jvm-profile   # the platform's driver recorded, summarised
    python -m bench.jvm_profile RECORDING.jfr           # a recording of any JVM

The recording (`recording_options`) samples every running Java thread each 10 ms (`jdk.ExecutionSample`
of JFR's `profile` settings) and keeps the compilers' and the collector's statistics. Each sample
is filed under the work its stack is part of, by the outermost frame that names one (`WORK`: the
batch's parse into the cache, a Parquet write, a shuffle, ...), and under what it was doing there,
by the innermost frame that names it (`DOING`). A sample is a thread's state, not a measured
time: shares are of the samples, and JFR samples at most a few threads per period, so a share is
a fraction of the Java threads' CPU, not of seconds. The JIT's compiler threads run native code,
which no sample shows: their time is the JVM's own count (`jdk.CompilerStatistics`), beside it."""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# (label, a fragment of a frame's "package.Class.method"), outermost first in meaning: a sample is filed
# under the first label whose fragment is in any of its frames.
WORK = (
    ("parse into the batch's cache", "CachedRDDBuilder"),
    ("parse into the batch's cache", "DefaultCachedBatchSerializer"),
    ("Parquet write (Delta)", "FileFormatDataWriter"),
    ("shuffle write", "ShuffleWriteProcessor"),
    ("broadcast build", "BroadcastExchangeExec"),
    ("code generation (Janino)", "CodeGenerator$.doCompile"),
    ("other tasks", "executor.Executor$TaskRunner."),
    ("driver: Delta's log and commits", "spark.sql.delta."),
    ("driver: calls from Python", "py4j."),
)
DOING = (
    ("the landing reader", "weir.LandingSource"),
    ("the contract's parse", "weir.ContractParse"),
    ("JSON (Jackson)", "jackson"),
    ("the cache's columns", ".columnar."),
    ("Parquet's dictionaries", "DictionaryValuesWriter"),
    ("Parquet's encodings", "org.apache.parquet"),
    ("compression", "ompress"),
    ("sort", "Sorter"),
    ("hash join", "HashedRelation"),
    ("aggregate", "Aggregat"),
    ("class loading", "ClassLoader.loadClass"),
    ("class loading", "URLClassPath"),
    ("class loading", "java.lang.Class.forName"),
    ("code generation", "codehaus.janino"),
    ("generated code", "GeneratedClass"),
)
SETTINGS = "profile"
STACK_DEPTH = 256


def recording_options(directory: Path) -> str:
    """The JVM options that record a JVM into a file of its own in `directory`, written at its
    exit, with stacks deep enough to reach a task's outermost frames."""
    return (f"-XX:FlightRecorderOptions=stackdepth={STACK_DEPTH} "
            f"-XX:StartFlightRecording=settings={SETTINGS},filename={directory}/,dumponexit=true")


def only_recording(directory: Path) -> Path:
    """The one recording a JVM started with `recording_options(directory)` left there at its exit."""
    found = sorted(directory.glob("*.jfr"))
    if len(found) != 1:
        raise RuntimeError(f"expected one JVM recording in {directory}, found {len(found)}")
    return found[0]


def _events(recording: Path, *types: str) -> dict[str, list[dict[str, Any]]]:
    """The recording's events of `types`, by type, in one read of it (`jfr print` starts a JVM)."""
    jfr = shutil.which("jfr")
    if jfr is None:
        raise RuntimeError("the JDK's `jfr` tool is not on the PATH")
    out = subprocess.run([jfr, "print", "--json", "--stack-depth", str(STACK_DEPTH), "--events",
                          ",".join(types), str(recording)], capture_output=True, text=True, check=True).stdout
    by_type: dict[str, list[dict[str, Any]]] = {t: [] for t in types}
    for event in json.loads(out)["recording"]["events"]:
        by_type[event["type"]].append(event)
    return by_type


def _frames(event: dict[str, Any]) -> list[str]:
    stack = event["values"].get("stackTrace") or {"frames": []}
    # a class's name as Java spells it: JFR gives most with slashes, hidden classes with dots
    return [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}" for f in stack["frames"]]


def _first(labels: tuple[tuple[str, str], ...], frames: list[str], default: str) -> str:
    return next((label for label, fragment in labels if any(fragment in f for f in frames)), default)


def _innermost(frames: list[str]) -> str:
    for frame in frames:
        for label, fragment in DOING:
            if fragment in frame:
                return label
    return "other"


def _seconds(value: str) -> float:
    """A duration of JFR's JSON: ISO-8601's `PT1H2M3.5S`, each part optional."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", value)
    if match is None:
        raise ValueError(f"not an ISO-8601 duration: {value!r}")
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def summary(recording: Path, top: int = 12) -> dict[str, Any]:
    """The recording's samples by work and by what it was doing there, its hottest methods (the
    innermost frame), and the JVM's time compiling and collecting."""
    events = _events(recording, "jdk.ExecutionSample", "jdk.CompilerStatistics", "jdk.GarbageCollection")
    samples = [s for s in (_frames(e) for e in events["jdk.ExecutionSample"]) if s]
    work: collections.Counter[str] = collections.Counter()
    doing: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    hottest: collections.Counter[str] = collections.Counter()
    for frames in samples:
        label = _first(WORK, frames, "other")
        work[label] += 1
        doing[label][_innermost(frames)] += 1
        hottest[frames[0]] += 1
    compiler = events["jdk.CompilerStatistics"]
    last = compiler[-1]["values"] if compiler else {}
    return {
        "samples": len(samples),
        "work": [{"work": label, "samples": n, "doing": dict(doing[label].most_common())}
                 for label, n in work.most_common()],
        "hottest": [{"method": m, "samples": n} for m, n in hottest.most_common(top)],
        "jit_compile_s": round(_seconds(str(last.get("totalTimeSpent", "PT0S"))), 1),
        "jit_compiles": int(last.get("compileCount", 0)),
        "gc_pause_s": round(sum(_seconds(str(e["values"]["sumOfPauses"]))
                                for e in events["jdk.GarbageCollection"]), 2),
    }


def markdown(profile: dict[str, Any]) -> list[str]:
    """The summary as report lines: a table of work, what each did, and the hottest methods."""
    n = max(profile["samples"], 1)
    lines = [f"{profile['samples']:,} samples of running Java threads; the JIT compiled for "
             f"{profile['jit_compile_s']} s ({profile['jit_compiles']:,} compiles, on its own "
             f"threads, not sampled); collections paused the JVM for {profile['gc_pause_s']} s.", "",
             "| work | share of samples | what it was doing (samples) |", "|---|---|---|"]
    for row in profile["work"]:
        doing = ", ".join(f"{k} {v}" for k, v in list(row["doing"].items())[:5])
        lines.append(f"| {row['work']} | {100 * row['samples'] / n:.1f} % | {doing} |")
    lines += ["", "| hottest method (innermost frame) | share of samples |", "|---|---|"]
    lines += [f"| `{h['method']}` | {100 * h['samples'] / n:.1f} % |" for h in profile["hottest"]]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python -m bench.jvm_profile RECORDING.jfr", file=sys.stderr)
        return 2
    print("\n".join(markdown(summary(Path(argv[0])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
