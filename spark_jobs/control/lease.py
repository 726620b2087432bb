"""The driver lease: one live driver per pipeline, never two on one checkpoint.

A driver takes the lease (`control/<P>/lease.json`) before it starts a query and gives it back
when it stops. Taking it happens under an exclusive `flock` on `lease.lock`, so two drivers
starting together cannot both win. A lease is stale — and may be taken over — only when its
holder is provably gone: on this host its pid (with the same kernel start time) no longer runs;
on another host its heartbeat (which renews the lease) is older than the TTL. A live but silent
driver on this host keeps its lease: the supervisor must kill it first, so a hung driver and its
successor never overlap.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spark_jobs.control.processes import ProcessRef
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
LEASE_TTL_S = 30.0


class LeaseHeldError(UserError):
    """Another live driver holds the pipeline's lease."""


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write to a temporary sibling, fsync, then rename over `path`: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(payload, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds (or held) a pipeline's lease."""

    pipeline: str
    pid: int
    host: str
    start_ticks: int | None
    token: str
    acquired_at: str

    @property
    def process(self) -> ProcessRef:
        return ProcessRef(self.pid, self.host, self.start_ticks)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeaseRecord:
        return cls(data["pipeline"], int(data["pid"]), data["host"], data.get("start_ticks"),
                   data["token"], data["acquired_at"])


def lease_path(home: WeirHome, pipeline: str) -> Path:
    return home.control(pipeline) / "lease.json"


def heartbeat_path(home: WeirHome, pipeline: str) -> Path:
    return home.control(pipeline) / "heartbeat.json"


@contextmanager
def _locked(home: WeirHome, pipeline: str) -> Iterator[None]:
    folder = home.control(pipeline)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lease.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read(home: WeirHome, pipeline: str) -> LeaseRecord | None:
    """The lease on file (live or stale), if any."""
    data = read_json(lease_path(home, pipeline))
    return LeaseRecord.from_json(data) if data else None


def last_renewal(home: WeirHome, record: LeaseRecord) -> dt.datetime:
    """The holder's latest heartbeat (which renews the lease), else the time it was taken."""
    beat = read_json(heartbeat_path(home, record.pipeline))
    if beat and beat.get("token") == record.token and beat.get("at"):
        return parse_iso(beat["at"])
    return parse_iso(record.acquired_at)


def is_stale(home: WeirHome, record: LeaseRecord, ttl_s: float = LEASE_TTL_S) -> bool:
    alive = record.process.alive()
    if alive is not None:
        return not alive
    return (now_utc() - last_renewal(home, record)).total_seconds() > ttl_s


def holder(home: WeirHome, pipeline: str, ttl_s: float = LEASE_TTL_S) -> LeaseRecord | None:
    """The live holder of the pipeline's lease, or None."""
    record = read(home, pipeline)
    if record is None or is_stale(home, record, ttl_s):
        return None
    return record


class Lease:
    """A lease this process holds; `release()` gives it back (only if it is still ours)."""

    def __init__(self, home: WeirHome, record: LeaseRecord) -> None:
        self.home = home
        self.record = record

    @property
    def pipeline(self) -> str:
        return self.record.pipeline

    @property
    def token(self) -> str:
        return self.record.token

    def release(self) -> None:
        with _locked(self.home, self.pipeline):
            current = read(self.home, self.pipeline)
            if current is not None and current.token == self.token:
                lease_path(self.home, self.pipeline).unlink(missing_ok=True)
                log.info("%s lease released by pid %d", self.pipeline, self.record.pid)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(home: WeirHome, pipeline: str, ttl_s: float = LEASE_TTL_S) -> Lease:
    """Take the pipeline's lease for this process, or raise `LeaseHeldError` naming the live holder."""
    me = ProcessRef.current()
    with _locked(home, pipeline):
        current = read(home, pipeline)
        if current is not None:
            if not is_stale(home, current, ttl_s):
                raise LeaseHeldError(
                    f"pipeline {pipeline} is already running: driver pid {current.pid} on "
                    f"{current.host} holds its lease since {current.acquired_at}; stop it first "
                    f"(Airflow DAG {pipeline}_stop)")
            log.warning("%s: taking over the stale lease of pid %d on %s (since %s)",
                        pipeline, current.pid, current.host, current.acquired_at)
        record = LeaseRecord(pipeline, me.pid, me.host, me.start_ticks, uuid.uuid4().hex,
                             iso(now_utc()))
        write_json_atomically(lease_path(home, pipeline), asdict(record))
    log.info("%s lease taken by pid %d on %s", pipeline, me.pid, me.host)
    return Lease(home, record)


def clear_stale(home: WeirHome, pipeline: str, ttl_s: float = LEASE_TTL_S) -> LeaseRecord | None:
    """Remove the lease of a holder that is gone (supervisor clean-up); returns what was removed."""
    with _locked(home, pipeline):
        current = read(home, pipeline)
        if current is None or not is_stale(home, current, ttl_s):
            return None
        lease_path(home, pipeline).unlink(missing_ok=True)
        return current
