"""How long each test module took in the last whole run, for scheduling only.

`make test` runs the suite on two xdist workers (`--dist loadgroup`), one module per unit of work
so that a module's servers start once. Giving the longest modules out first keeps one worker from
being left with a long module while the other has finished (longest processing time first).
The seconds are those of a fresh clone's run; a stale or missing entry only changes the order the
modules are handed out in, never what runs.

Refresh from a run with per-test durations (`PYTEST_ADDOPTS="--durations=0" make test > run.log`):

    .venv/bin/python -m tests.support.durations run.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

RECORD = Path(__file__).with_name("durations.json")
LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown) +([^:\s]+\.py)::")


def module_seconds() -> dict[str, float]:
    """Seconds per test module (path from the repository root), as last recorded."""
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


def parse(log: str) -> dict[str, float]:
    """Per-module seconds from pytest's `--durations=0` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        if m := LINE.match(line.strip()):
            seconds[m.group(2)] += float(m.group(1))
    return {module: round(s, 1) for module, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.durations RUN_LOG")
    found = parse(Path(sys.argv[1]).read_text(errors="replace"))
    if not found:
        sys.exit(f"no --durations=0 lines in {sys.argv[1]}")
    RECORD.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{len(found)} modules, {sum(found.values()):.0f} s, written to {RECORD}")
