"""Peak memory and CPU time of a benchmark worker's whole process tree (Python, its JVM, a `weir
run` driver and that driver's JVM), sampled from /proc while it runs: the harness measures every
run the same way, whatever the run starts inside itself."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _status(pid: int) -> dict[str, str]:
    """The fields of /proc/<pid>/status, or {} when the process is gone."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _kb(value: str | None) -> int:
    return int(value.split()[0]) if value else 0


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command (state, the 3rd field, first), or None
    when the process is gone. The command may hold spaces and brackets: split after its ")"."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_ticks(fields: list[str]) -> tuple[int, int]:
    """(start time, user + system CPU ticks so far) from a process's stat fields (`_stat`): utime
    is field 14, stime 15, starttime 22 (proc(5)). The start time tells a re-used pid apart."""
    return int(fields[19]), int(fields[11]) + int(fields[12])


def descendants(root: int) -> dict[int, list[str]]:
    """`root` and every process below it (by parent pid), as /proc shows them now, each with its
    stat fields (`_stat`)."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = _stat(pid)
        if fields is None or len(fields) < 20 or not fields[1].lstrip("-").isdigit():
            continue
        stats[pid] = fields
        children.setdefault(int(fields[1]), []).append(pid)
    found: dict[int, list[str]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid not in found and pid in stats:
            found[pid] = stats[pid]
            todo += children.get(pid, [])
    return found


class PeakMemory:
    """Samples the tree under `root` every `every_s` seconds from `start()` to `stop()`: the peak
    of the sum of its resident sets, the largest peak resident set (VmHWM) of any JVM in it, and
    the CPU time its processes used (each process's last sample: up to `every_s` of a process's
    last moments is missed). CPU time tells work from waiting: on two cores, a run that keeps both
    busy spends about twice its wall time."""

    def __init__(self, root: int, every_s: float = 0.5) -> None:
        self.root, self.every_s = root, every_s
        self.tree_peak_kb = self.jvm_peak_kb = 0
        self.cpu_ticks: dict[tuple[int, int], int] = {}    # (pid, start time) → ticks
        self.cpu_timeline: list[list[float]] = []           # [epoch seconds, CPU seconds so far]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"peak-memory-{root}", daemon=True)

    def sample(self) -> None:
        total = 0
        for pid, fields in descendants(self.root).items():
            status = _status(pid)
            total += _kb(status.get("VmRSS"))
            if status.get("Name", "").strip() == "java":
                self.jvm_peak_kb = max(self.jvm_peak_kb, _kb(status.get("VmHWM")))
            started, ticks = _cpu_ticks(fields)
            self.cpu_ticks[(pid, started)] = ticks
        self.tree_peak_kb = max(self.tree_peak_kb, total)
        used_s = sum(self.cpu_ticks.values()) / TICKS_PER_S
        self.cpu_timeline.append([round(time.time(), 3), round(used_s, 2)])

    def _loop(self) -> None:
        while not self._done.wait(self.every_s):
            self.sample()

    def start(self) -> PeakMemory:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, float | None]:
        """Stop sampling; the peaks in MB (None when no JVM was seen), the CPU seconds, and the CPU
        seconds used so far at each sample (`cpu_timeline`: what a span of the run used)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        return {"jvm_peak_rss_mb": round(self.jvm_peak_kb / 1024, 1) if self.jvm_peak_kb else None,
                "tree_peak_rss_mb": round(self.tree_peak_kb / 1024, 1),
                "tree_cpu_s": round(sum(self.cpu_ticks.values()) / TICKS_PER_S, 1),
                "cpu_timeline": self.cpu_timeline}
