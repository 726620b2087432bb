"""How `make test` shares the suite between its xdist workers (one per core: the Makefile).

A unit of work is a test module, so a module's servers (Airflow, PostgreSQL, the broker) start on
one worker only; modules that cannot run beside each other form one unit (`SHARED`). Units are
handed out longest first (longest processing time first), so neither worker is left with a long
module after the other has finished. How long a module takes is what the last whole run measured
(`module_seconds.json`); a stale or missing entry only changes the order, never what runs.

Refresh the seconds from a run with per-test durations
(`PYTEST_ADDOPTS="--durations=0" make test > run.log`):

    .venv/bin/python -m tests.support.scheduling run.log

(xdist's own `--dist loadgroup` would carry `xdist_group` marks, but with pytest 9 its marks no
longer reach the scheduler: it renames `item._nodeid`, which pytest 9 no longer reads.)
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("module_seconds.json")
# `make up` stacks take Airflow's default log-server ports (8793, 8794): one at a time.
SHARED = {module: "make up" for module in (
    "tests/airflow/test_cockpit_browser.py",
    "tests/kafka/test_make_up_kafka.py",
    "tests/cluster/test_celery_postgres.py",
)}
DURATION_LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown) +([^:\s]+\.py)::")


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the shared unit its module is in."""
    module = nodeid.split("::", 1)[0]
    return SHARED.get(module, module)


def module_seconds() -> dict[str, float]:
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {}


def unit_seconds(nodeids: Iterable[str]) -> dict[str, float]:
    """The recorded seconds of each unit the tests fall in."""
    recorded: dict[str, float] = module_seconds()
    weight: dict[str, float] = defaultdict(float)
    for nodeid in nodeids:    # a module's seconds count once, for its first test
        weight[unit(nodeid)] += recorded.pop(nodeid.split("::", 1)[0], 0.0)
    return weight


def scheduler(config: Any, log: Any) -> Any:
    """xdist's scope scheduler with Weir's units. It hands units out in the collection's order,
    which `tests/conftest.py` sorts longest first (the scheduler's own reordering, by number of
    tests, is turned off)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    config.option.loadscopereorder = False
    return ModuleUnits(config, log)


def parse(log: str) -> dict[str, float]:
    """Per-module seconds from pytest's `--durations=0` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        if m := DURATION_LINE.match(line.strip()):
            seconds[m.group(2)] += float(m.group(1))
    return {module: round(s, 1) for module, s in sorted(seconds.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.scheduling RUN_LOG")
    found = parse(Path(sys.argv[1]).read_text(errors="replace"))
    if not found:
        sys.exit(f"no --durations=0 lines in {sys.argv[1]}")
    RECORD.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{len(found)} modules, {sum(found.values()):.0f} s, written to {RECORD}")
