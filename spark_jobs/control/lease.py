"""The driver lease: one driver per pipeline may write its tables, fenced.

A driver takes the lease before it starts a query, renews it while it runs (a keep-alive thread of
`Lease`) and gives it back when it stops. The lease lives in the control store
(`spark_jobs.control.store`: versions under `control/<P>/lease/`, or a row of PostgreSQL's
`weir_control.leases`). Every change (take, renew, give back) is decided on the lease as read and
written by compare-and-swap (`_change`): of two drivers starting together only one can write, and
the other decides again on what the winner wrote, on one host or many; no lock is held, so a
holder paused in the middle of a change blocks no one else's. Every acquisition gets the next
fencing token (a counter the store keeps, never reused).
Whether a holder still counts is judged once, in `spark_jobs.control.liveness`: a lease may be
taken over once its holder is provably gone on this host or its own renewal is older than the
TTL. A holder that was paused past the TTL may wake up after a take-over: `Lease.check` (called
by the driver before and after each batch, through `fence`) raises `LeaseLostError` when its
token is no longer the current one or its renewal has expired; and the token travels inside each
of its Delta commits (`spark_jobs.tables.Fencing`), so a commit it had in flight, or starts
before it checks again, cannot land once the new holder has committed.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from spark_jobs.control.liveness import Liveness, holder_may_commit, judge, lease_ttl_s
from spark_jobs.control.processes import ProcessRef
from spark_jobs.control.store import (  # noqa: F401  (read_json, write_json_atomically: re-exported)
    HEARTBEAT,
    ControlStore,
    FileStore,
    LeaseSlot,
    control_store,
    read_json,
    write_json_atomically,
)
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.tables import Fencing

log = logging.getLogger(__name__)


class LeaseHeldError(UserError):
    """Another live driver holds the pipeline's lease."""


class LeaseLostError(RuntimeError):
    """This driver no longer holds its pipeline's lease (taken over, or its renewal expired):
    it must not commit anything more, and exits."""


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class LeaseRecord:
    """Who holds (or held) a pipeline's lease."""

    pipeline: str
    pid: int
    host: str
    start_ticks: int | None
    token: str
    acquired_at: str
    fencing_token: int = 0     # grows with every acquisition of the pipeline's lease
    renewed_at: str | None = None
    # "driver", or the checkpoint action holding the pipeline still (restore, rewind, reset)
    holder: str = "driver"

    @property
    def is_driver(self) -> bool:
        return self.holder == "driver"

    @property
    def process(self) -> ProcessRef:
        return ProcessRef(self.pid, self.host, self.start_ticks)

    @property
    def last_renewal(self) -> dt.datetime:
        return parse_iso(self.renewed_at or self.acquired_at)

    def renewal_age_s(self, now: dt.datetime | None = None) -> float:
        return ((now or now_utc()) - self.last_renewal).total_seconds()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeaseRecord:
        return cls(data["pipeline"], int(data["pid"]), data["host"], data.get("start_ticks"),
                   data["token"], data["acquired_at"], int(data.get("fencing_token") or 0),
                   data.get("renewed_at"), data.get("holder") or "driver")


def heartbeat_path(home: WeirHome, pipeline: str) -> Path:
    """Where the file store keeps the heartbeat (the embedded default; tests and runbooks name it)."""
    return FileStore(home).path(pipeline, HEARTBEAT)


def _record(data: dict[str, Any] | None) -> LeaseRecord | None:
    return LeaseRecord.from_json(data) if data else None


T = TypeVar("T")


def _change(store: ControlStore, pipeline: str, decide: Callable[[LeaseSlot], T]) -> T:
    """Read the lease, let `decide` stage a change on what it read (or raise), and write it by
    compare-and-swap; when another change was written meanwhile, decide again on that one. Each
    round reads afresh, so `decide` sees only what the store holds."""
    while True:
        slot = store.lease_slot(pipeline)
        outcome = decide(slot)
        if not slot.changed or store.swap_lease(pipeline, slot):
            return outcome
        log.info("%s: the lease changed while this change was decided (version %d); deciding "
                 "again", pipeline, slot.version)


def read(home: WeirHome, pipeline: str) -> LeaseRecord | None:
    """The lease in the control store (live or stale), if any."""
    return _record(control_store(home).read_lease(pipeline))


def liveness(record: LeaseRecord, ttl_s: float | None = None) -> Liveness:
    """The one judgement (`spark_jobs.control.liveness.judge`) applied to a lease on file."""
    return judge(record.process.alive(), record.renewal_age_s(),
                 lease_ttl_s() if ttl_s is None else ttl_s)


def is_stale(record: LeaseRecord, ttl_s: float | None = None) -> bool:
    return liveness(record, ttl_s).takeable


def holder(home: WeirHome, pipeline: str, ttl_s: float | None = None) -> LeaseRecord | None:
    """The live holder of the pipeline's lease, or None."""
    record = read(home, pipeline)
    if record is None or is_stale(record, ttl_s):
        return None
    return record


# The leases this process holds, by pipeline: what `fence` checks inside a driver's batches.
_held: dict[str, Lease] = {}


def fencing(pipeline: str) -> Fencing | None:
    """The fencing token this process's lease on `pipeline` puts into its Delta commits (None: no
    lease held, nothing to fence)."""
    held = _held.get(pipeline)
    return held.fencing if held is not None else None


def fence(pipeline: str) -> None:
    """Raise `LeaseLostError` unless this process still holds `pipeline`'s lease. A process that
    never took it (a benchmark running one batch by hand) is no driver: nothing to fence."""
    held = _held.get(pipeline)
    if held is not None:
        held.check()


class Lease:
    """A lease this process holds: renewed by a keep-alive thread, checked before every commit
    (`check`), given back by `release()` (only if it is still ours)."""

    def __init__(self, home: WeirHome, record: LeaseRecord, ttl_s: float | None = None, *,
                 renewed: bool = True) -> None:
        self.home = home
        # False: a lease this process shares with its holder (`join`), checked, never renewed or
        # given back by it
        self.renewed = renewed
        self.store: ControlStore = control_store(home)
        self.record = record
        self.ttl_s = lease_ttl_s() if ttl_s is None else ttl_s
        self.lost: str | None = None
        fencing = Fencing(record.pipeline, record.fencing_token)
        self.fencing = fencing if renewed else fencing.shared()
        self._released = threading.Event()
        self._keepalive = threading.Thread(target=self._renew_loop, daemon=True,
                                           name=f"weir-lease-{record.pipeline}")

    @property
    def pipeline(self) -> str:
        return self.record.pipeline

    @property
    def token(self) -> str:
        return self.record.token

    @property
    def fencing_token(self) -> int:
        return self.record.fencing_token

    def _lose(self, why: str) -> LeaseLostError:
        if self.lost is None:
            self.lost = why
            log.error("%s: LEASE LOST by pid %d (fencing token %d): %s; committing nothing more",
                      self.pipeline, self.record.pid, self.fencing_token, why)
        return LeaseLostError(f"{self.pipeline}: lease lost by pid {self.record.pid} "
                              f"(fencing token {self.fencing_token}): {self.lost}")

    def _verify(self, current: LeaseRecord | None) -> LeaseRecord:
        if self.lost is not None:
            raise self._lose(self.lost)
        if current is None:
            raise self._lose("the lease is gone from the control store")
        if current.token != self.token or current.fencing_token != self.fencing_token:
            raise self._lose(f"taken over by pid {current.pid} on {current.host} "
                             f"(fencing token {current.fencing_token})")
        age = current.renewal_age_s()
        if not holder_may_commit(age, self.ttl_s):
            raise self._lose(f"last renewed {age:.1f}s ago (TTL {self.ttl_s:.0f}s)")
        return current

    def check(self) -> None:
        """Raise `LeaseLostError` unless this lease is still the pipeline's current one and its
        own renewal is fresh. Called before each batch and each Delta commit of the driver."""
        self._verify(_record(self.store.read_lease(self.pipeline)))

    def renew(self) -> None:
        """Push the lease's renewal time forward (only while it is still ours and unexpired: a
        holder that woke up after its TTL never resurrects its lease)."""
        def renewal(slot: LeaseSlot) -> LeaseRecord:
            renewed = replace(self._verify(_record(slot.current)), renewed_at=iso(now_utc()))
            slot.put(asdict(renewed))
            return renewed

        self.record = _change(self.store, self.pipeline, renewal)

    def _renew_loop(self) -> None:
        every_s = min(5.0, self.ttl_s / 6)
        while not self._released.wait(every_s):
            try:
                self.renew()
            except LeaseLostError:
                return
            except Exception:  # a full disk must not kill the thread: the TTL then fences us
                log.exception("%s: lease renewal failed", self.pipeline)

    def release(self) -> None:
        self._released.set()
        if _held.get(self.pipeline) is self:
            del _held[self.pipeline]
        if not self.renewed:
            return

        def give_back(slot: LeaseSlot) -> bool:
            current = _record(slot.current)
            if current is None or current.token != self.token:
                return False
            slot.clear()
            return True

        if _change(self.store, self.pipeline, give_back):
            log.info("%s lease released by pid %d", self.pipeline, self.record.pid)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(home: WeirHome, pipeline: str, ttl_s: float | None = None, *,
            holder: str = "driver", used_tokens: int = 0) -> Lease:
    """Take the pipeline's lease for this process with the next fencing token and keep it renewed,
    or raise `LeaseHeldError` naming the live holder. `holder` says what holds it: a driver, or a
    checkpoint action that keeps the pipeline still. The token is above `used_tokens` too (the
    highest the pipeline's tables carry: a lost fencing counter must not make the next driver's
    commits older than its predecessors', which Delta would skip)."""
    me = ProcessRef.current()

    def take(slot: LeaseSlot) -> LeaseRecord:
        current = _record(slot.current)
        last_token = max(used_tokens, slot.last_fencing_token)
        if current is not None:
            state = liveness(current, ttl_s)
            if not state.takeable:
                what = "driver" if current.is_driver else f"{current.holder} (a checkpoint action)"
                raise LeaseHeldError(
                    f"pipeline {pipeline} is already running: {what} pid {current.pid} on "
                    f"{current.host} holds its lease since {current.acquired_at}; stop it first "
                    f"(Airflow DAG {pipeline}_stop)")
            log.warning("%s: taking over the %s lease of pid %d on %s (fencing token %d, renewed %s)",
                        pipeline, state, current.pid, current.host, current.fencing_token,
                        current.renewed_at or current.acquired_at)
            last_token = max(last_token, current.fencing_token)
        now = iso(now_utc())
        record = LeaseRecord(pipeline, me.pid, me.host, me.start_ticks, uuid.uuid4().hex, now,
                             last_token + 1, now, holder)
        slot.put(asdict(record))
        return record

    record = _change(control_store(home), pipeline, take)
    log.info("%s lease taken by pid %d on %s (fencing token %d)", pipeline, me.pid, me.host,
             record.fencing_token)
    lease = Lease(home, record, ttl_s)
    _held[pipeline] = lease
    lease._keepalive.start()
    return lease


def join(home: WeirHome, pipeline: str, holder_pid: int, ttl_s: float | None = None) -> Lease:
    """Share the pipeline's lease held by `holder_pid`, this process's parent on this host (a
    driver's second process: `spark_jobs.derived`). The shared lease fences this process's batches
    and commits with the holder's token (`fence`, `fencing`) and is lost when the holder's is; the
    holder alone renews it and gives it back. Raises `LeaseLostError` when that process does not
    hold the lease (any more)."""
    record = read(home, pipeline)
    me = ProcessRef.current()
    if record is None or (record.pid, record.host) != (holder_pid, me.host) or not record.is_driver:
        held_by = "nobody" if record is None else f"pid {record.pid} on {record.host} ({record.holder})"
        raise LeaseLostError(f"{pipeline}: pid {holder_pid} on {me.host} holds no driver lease to share "
                             f"(held by {held_by})")
    lease = Lease(home, record, ttl_s, renewed=False)
    lease.check()
    _held[pipeline] = lease
    log.info("%s lease of pid %d shared by pid %d (fencing token %d)", pipeline, holder_pid, me.pid,
             record.fencing_token)
    return lease


def clear_stale(home: WeirHome, pipeline: str, ttl_s: float | None = None) -> LeaseRecord | None:
    """Remove the lease of a holder that is gone or expired (supervisor clean-up); returns what
    was removed. The fencing counter stays, so the next holder's token is still higher."""
    def clear(slot: LeaseSlot) -> LeaseRecord | None:
        current = _record(slot.current)
        if current is None or not is_stale(current, ttl_s):
            return None
        slot.clear()
        return current

    return _change(control_store(home), pipeline, clear)
