"""Is a pipeline's driver alive? Checkpoint operations that need the stream stopped ask here.

The control plane's lease (`spark_jobs.control.lease`) is the authority: a live holder means a
running driver. `live_leases` also counts stray lease files, so `validate` can name the
impossible-but-dangerous case of two live drivers on one checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    from spark_jobs.control import lease

    record = lease.holder(home, pipeline)
    if record is None:
        return None
    return f"driver pid {record.pid} on {record.host} (lease taken {record.acquired_at})"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_leases(home: WeirHome, pipeline: str) -> list[LiveLease]:
    """Every lease-like file under the pipeline's control folder whose holder is alive: the
    lease itself (judged by the control plane) and any stray `*lease*.json` copy (judged by pid
    on this host)."""
    from spark_jobs.control import lease

    folder = home.control(pipeline)
    if not folder.is_dir():
        return []
    official = lease.lease_path(home, pipeline)
    found: list[LiveLease] = []
    for path in sorted(folder.glob("*lease*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            pid, host = int(data["pid"]), str(data["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if path == official:
            alive = lease.holder(home, pipeline) is not None
        else:
            alive = host == socket.gethostname() and _pid_alive(pid)
        if alive:
            found.append(LiveLease(path, pid, host))
    return found
