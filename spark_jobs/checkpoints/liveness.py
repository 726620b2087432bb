"""Is a pipeline's driver alive? Checkpoint operations that need the stream stopped ask here.

The control plane's lease (`spark_jobs.control.lease`) is the authority: a live holder means a
running driver. `live_leases` also counts stray lease files, so `validate` can name the
impossible-but-dangerous case of two live drivers on one checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.control import lease

if TYPE_CHECKING:
    from pathlib import Path

    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveLease:
    file: Path
    pid: int
    host: str


def running_driver(home: WeirHome, pipeline: str) -> str | None:
    """A description of the live driver holding `pipeline`'s lease, or None when none runs."""

    record = lease.holder(home, pipeline)
    if record is None:
        return None
    return f"driver pid {record.pid} on {record.host} (lease taken {record.acquired_at})"


def live_leases(home: WeirHome, pipeline: str) -> list[LiveLease]:
    """Every lease-like file under the pipeline's control folder whose holder is alive, as the
    control plane judges a lease: the lease itself and any stray `*lease*.json` copy."""

    folder = home.control(pipeline)
    if not folder.is_dir():
        return []
    official = lease.lease_path(home, pipeline)
    found: list[LiveLease] = []
    for path in sorted(folder.glob("*lease*.json")):
        try:
            record = lease.LeaseRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if path == official:
            alive = lease.holder(home, pipeline) is not None
        else:
            alive = not lease.is_stale(record)  # the control plane's one judgement, on the copy
        if alive:
            found.append(LiveLease(path, record.pid, record.host))
    return found
