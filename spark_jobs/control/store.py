"""Where a pipeline's control state lives: one interface, two stores.

The control state is the driver's lease (with its fencing counter), its heartbeat, stop requests,
the supervisor's state and the stopped marker. `FileStore` keeps them as JSON files under
`WEIR_HOME/control/<P>/`, the lease guarded by `flock` (the embedded default: one host or one
shared POSIX filesystem). `PostgresStore` keeps them in a PostgreSQL database (schema
`weir_control`), so drivers and Airflow workers on hosts that share no filesystem see one state;
the lease row is changed only inside a transaction that holds it `SELECT ... FOR UPDATE`.
`control_store(home)` picks one by the `WEIR_CONTROL_STORE` setting. What a lease means (who may
take it, fencing, renewal) is decided in `spark_jobs.control.lease`, the same for both stores.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spark_jobs.home import WeirHome
from spark_jobs.settings import settings

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection

log = logging.getLogger(__name__)

# The documents a pipeline keeps besides its lease; a file store names its file after the kind.
HEARTBEAT = "heartbeat"
STOP_REQUEST = "stop-request"
SUPERVISOR = "supervisor"
STOPPED = "stopped"
LAUNCH = "launch"                    # the driver's launch record and cluster handle
ADMITTED_CODE = "admitted_code"      # the code the deploy gate last admitted
KINDS = (HEARTBEAT, STOP_REQUEST, SUPERVISOR, STOPPED, LAUNCH, ADMITTED_CODE)
PRIVATE_FILE = 0o600                 # a launch record holds a command line
SCHEMA = "weir_control"


def write_json_atomically(path: Path, payload: dict[str, Any], mode: int | None = None) -> None:
    """Write to a temporary sibling, fsync, then rename over `path`: readers never see half a file
    (nor, with `mode`, a file more open than `mode`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w", encoding="utf-8", opener=None if mode is None else (
            lambda name, flags: os.open(name, flags, mode))) as out:
        json.dump(payload, out, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@dataclass
class LeaseSlot:
    """A pipeline's lease as seen inside the store's exclusive section: the record on file (live
    or stale, as a dict) and the highest fencing token ever handed out. `put`/`clear` stage the
    change; the store applies it atomically when the section ends without an error."""

    current: dict[str, Any] | None
    last_fencing_token: int
    written: dict[str, Any] | None = None
    cleared: bool = False

    def put(self, record: dict[str, Any]) -> None:
        self.written, self.cleared = record, False
        self.last_fencing_token = max(self.last_fencing_token, int(record.get("fencing_token") or 0))

    def clear(self) -> None:
        self.written, self.cleared = None, True


class ControlStore(Protocol):
    """A pipeline's control state. Documents (`KINDS`) are whole JSON objects, replaced at once."""

    def read_lease(self, pipeline: str) -> dict[str, Any] | None:
        """The lease record (live or stale), read without taking the lease's lock."""
        ...

    def lease_slot(self, pipeline: str) -> Any:
        """A context manager: the exclusive section in which a lease is taken, renewed or given
        back (yields a `LeaseSlot`); no other holder reads or writes the lease meanwhile."""
        ...

    def get(self, pipeline: str, kind: str) -> dict[str, Any] | None: ...

    def put(self, pipeline: str, kind: str, document: dict[str, Any]) -> None: ...

    def delete(self, pipeline: str, kind: str) -> None: ...

    def describe(self, pipeline: str, kind: str) -> str:
        """Where the document is kept, for messages and runbooks."""
        ...


@dataclass(frozen=True)
class FileStore:
    """The embedded default: JSON files under `WEIR_HOME/control/<P>/`, the lease under `flock`."""

    home: WeirHome

    def path(self, pipeline: str, kind: str) -> Path:
        return self.home.control(pipeline) / f"{kind}.json"

    def lease_path(self, pipeline: str) -> Path:
        return self.path(pipeline, "lease")

    def fencing_path(self, pipeline: str) -> Path:
        return self.path(pipeline, "fencing")

    def read_lease(self, pipeline: str) -> dict[str, Any] | None:
        return read_json(self.lease_path(pipeline))

    @contextmanager
    def lease_slot(self, pipeline: str) -> Iterator[LeaseSlot]:
        folder = self.home.control(pipeline)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "lease.lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                last = int((read_json(self.fencing_path(pipeline)) or {}).get("fencing_token") or 0)
                slot = LeaseSlot(self.read_lease(pipeline), last)
                yield slot
                if slot.written is not None:
                    if slot.last_fencing_token > last:
                        write_json_atomically(self.fencing_path(pipeline), {
                            "pipeline": pipeline, "fencing_token": slot.last_fencing_token})
                    write_json_atomically(self.lease_path(pipeline), slot.written)
                elif slot.cleared:
                    self.lease_path(pipeline).unlink(missing_ok=True)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def get(self, pipeline: str, kind: str) -> dict[str, Any] | None:
        return read_json(self.path(pipeline, kind))

    def put(self, pipeline: str, kind: str, document: dict[str, Any]) -> None:
        write_json_atomically(self.path(pipeline, kind), document, mode=PRIVATE_FILE)

    def delete(self, pipeline: str, kind: str) -> None:
        self.path(pipeline, kind).unlink(missing_ok=True)

    def describe(self, pipeline: str, kind: str) -> str:
        return str(self.path(pipeline, kind))


_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.leases (
    pipeline text PRIMARY KEY,
    record jsonb,                                -- the holder, NULL once given back
    fencing_token bigint NOT NULL DEFAULT 0,     -- the highest token handed out; never goes down
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.documents (
    pipeline text NOT NULL,
    kind text NOT NULL,
    body jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, kind)
);
"""
# Any constant: serialises the first `CREATE ... IF NOT EXISTS` of concurrent processes.
_DDL_LOCK = 0x5745_4952


@dataclass
class PostgresStore:
    """Control state in a PostgreSQL database (`url`: a libpq URL), reachable over TCP from every
    driver and Airflow worker. One connection per thread (the lease keep-alive, the heartbeat and
    the driver's own checks run concurrently), reopened after a fork or a lost connection."""

    url: str
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _ready: bool = field(default=False, repr=False)

    def _connection(self) -> PgConnection:
        import psycopg2

        conn = getattr(self._local, "conn", None)
        if conn is not None and (conn.closed or self._local.pid != os.getpid()):
            conn = None
        if conn is None:
            conn = psycopg2.connect(self.url, connect_timeout=10, application_name="weir-control")
            conn.autocommit = True
            self._local.conn, self._local.pid = conn, os.getpid()
        if not self._ready:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                cur.execute(_DDL)
                cur.execute("COMMIT")
            self._ready = True
        return conn

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        import psycopg2

        conn = self._connection()
        try:
            with conn.cursor() as cur:
                yield cur
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            conn.close()  # the next call reconnects
            raise

    def read_lease(self, pipeline: str) -> dict[str, Any] | None:
        with self._cursor() as cur:
            cur.execute(f"SELECT record FROM {SCHEMA}.leases WHERE pipeline = %s", (pipeline,))
            row = cur.fetchone()
        return row[0] if row else None

    @contextmanager
    def lease_slot(self, pipeline: str) -> Iterator[LeaseSlot]:
        from psycopg2.extras import Json

        with self._cursor() as cur:
            cur.execute("BEGIN")
            try:
                cur.execute(f"INSERT INTO {SCHEMA}.leases (pipeline) VALUES (%s) "
                            "ON CONFLICT (pipeline) DO NOTHING", (pipeline,))
                cur.execute(f"SELECT record, fencing_token FROM {SCHEMA}.leases "
                            "WHERE pipeline = %s FOR UPDATE", (pipeline,))
                record, last = cur.fetchone()
                slot = LeaseSlot(record, int(last))
                yield slot
                if slot.written is not None or slot.cleared:
                    cur.execute(f"UPDATE {SCHEMA}.leases SET record = %s, fencing_token = "
                                "GREATEST(fencing_token, %s), updated_at = now() WHERE pipeline = %s",
                                (Json(slot.written) if slot.written is not None else None,
                                 slot.last_fencing_token, pipeline))
                cur.execute("COMMIT")
            except BaseException:
                if not cur.connection.closed:
                    cur.execute("ROLLBACK")
                raise

    def get(self, pipeline: str, kind: str) -> dict[str, Any] | None:
        with self._cursor() as cur:
            cur.execute(f"SELECT body FROM {SCHEMA}.documents WHERE pipeline = %s AND kind = %s",
                        (pipeline, kind))
            row = cur.fetchone()
        return row[0] if row else None

    def put(self, pipeline: str, kind: str, document: dict[str, Any]) -> None:
        from psycopg2.extras import Json

        with self._cursor() as cur:
            cur.execute(f"INSERT INTO {SCHEMA}.documents (pipeline, kind, body) VALUES (%s, %s, %s) "
                        "ON CONFLICT (pipeline, kind) DO UPDATE SET body = EXCLUDED.body, "
                        "updated_at = now()", (pipeline, kind, Json(document)))

    def delete(self, pipeline: str, kind: str) -> None:
        with self._cursor() as cur:
            cur.execute(f"DELETE FROM {SCHEMA}.documents WHERE pipeline = %s AND kind = %s",
                        (pipeline, kind))

    def describe(self, pipeline: str, kind: str) -> str:
        where = self.url.rpartition("@")[2]  # never the password
        return f"{SCHEMA}.documents ({pipeline}, {kind}) in postgresql://{where}"


# One PostgresStore (and its connections) per URL for the life of the process.
_postgres: dict[str, PostgresStore] = {}
_postgres_lock = threading.Lock()


def control_store(home: WeirHome) -> ControlStore:
    """The store of this process's control state: `WEIR_CONTROL_STORE`'s database when set,
    else the files under `home`."""
    url = settings().control_store
    if not url:
        return FileStore(home)
    with _postgres_lock:
        store = _postgres.get(url)
        if store is None:
            store = _postgres[url] = PostgresStore(url)
        return store
