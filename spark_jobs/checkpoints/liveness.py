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
from spark_jobs.control.store import LEASE, control_store

if TYPE_CHECKING:
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveLease:
    where: str           # the store's description of the lease, or a stray file's path
    pid: int
    host: str


def running_driver(home: WeirHome, pipeline: str) -> str | None:
    """A description of the live driver holding `pipeline`'s lease, or None when none runs."""

    record = lease.holder(home, pipeline)
    if record is None:
        return None
    return f"driver pid {record.pid} on {record.host} (lease taken {record.acquired_at})"


def live_leases(home: WeirHome, pipeline: str) -> list[LiveLease]:
    """Every live lease of the pipeline, as the control plane judges a lease: the lease in the
    control store and any stray `*lease*.json` copy under the pipeline's control folder."""

    found: list[LiveLease] = []
    record = lease.holder(home, pipeline)
    if record is not None:
        found.append(LiveLease(control_store(home).describe(pipeline, LEASE), record.pid,
                               record.host))
    folder = home.control(pipeline)
    for path in sorted(folder.glob("*lease*.json")) if folder.is_dir() else ():
        try:
            copy = lease.LeaseRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not lease.is_stale(copy):  # the control plane's one judgement, on the copy
            found.append(LiveLease(str(path), copy.pid, copy.host))
    return found
