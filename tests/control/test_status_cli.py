"""`weir status` is what the on-call runs first: it must answer, every time. It read the progress
table through Arrow's threaded scan, and about one exit in three aborted the process ("terminate
called without an active exception", exit 134) after printing — here the real CLI runs again and
again against a real progress table (written by the driver's own writer, no JVM). The abort is
rare under load (1 in 160 runs here), so the mechanism is checked too: a read leaves no new
native thread of the interpreter behind (Arrow's I/O threads, which call into Python)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spark_jobs.control import platform_tables, progress
from spark_jobs.home import WeirHome

RUNS = 20


def write_progress(home: WeirHome) -> None:
    rows = [progress.progress_row("playback", {
        "name": f"playback_{query}", "id": "q", "runId": "r", "batchId": batch,
        "timestamp": f"2026-11-21T03:0{batch}:00.000Z", "numInputRows": 10,
        "durationMs": {"triggerExecution": 900}, "sources": [], "stateOperators": []}, driver_pid=1)
        for query in ("ingest", "gold") for batch in range(3)]
    platform_tables.append(progress.table_path(home), rows, progress.schema())


def test_status_answers_every_time(tmp_path: Path) -> None:
    home = WeirHome(tmp_path / "weir")
    write_progress(home)
    env = {**os.environ, "WEIR_HOME": str(home.root)}
    failures = []
    for _ in range(RUNS):
        done = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "status", "playback", "--json"],
                              env=env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            failures.append(f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
            continue
        status = json.loads(done.stdout)
        assert {q["name"]: q["last_batch_id"] for q in status["queries"]} == {
            "playback_ingest": 2, "playback_gold": 2}
    assert not failures, f"{len(failures)}/{RUNS} runs failed: {failures[:3]}"


THREADS = """
import os, sys
from pathlib import Path
from spark_jobs.control import platform_tables

def native():   # threads not named by their runtime (tokio, jemalloc): the interpreter's own
    return sum(open(f"/proc/self/task/{t}/comm").read().strip() == "python"
               for t in os.listdir("/proc/self/task"))

path = Path(sys.argv[1])
platform_tables.read(path, equals={"pipeline": "elsewhere"})    # libraries loaded, runtime up
before = native()
rows = platform_tables.read(path, equals={"pipeline": "playback"}, columns=["query", "batch_id"])
print(len(rows), before, native())
"""


def test_a_read_leaves_no_thread_that_can_call_into_python_at_exit(tmp_path: Path) -> None:
    home = WeirHome(tmp_path / "weir")
    write_progress(home)
    done = subprocess.run([sys.executable, "-c", THREADS, str(progress.table_path(home))],
                          capture_output=True, text=True, timeout=120, check=True)
    rows, before, after = map(int, done.stdout.split())
    assert rows == 6 and after == before, done.stdout
