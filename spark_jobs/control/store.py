"""Where a pipeline's control state lives: one interface, two stores.

The control state is the driver's lease (with its fencing counter), its heartbeat, stop requests,
the supervisor's state and the stopped marker. `FileStore` keeps them as JSON files under
`WEIR_HOME/control/<P>/` (the embedded default: one host or one shared POSIX filesystem).
`PostgresStore` keeps them in a PostgreSQL database (schema `weir_control`), so drivers and Airflow
workers on hosts that share no filesystem see one state. `control_store(home)` picks one by the
`WEIR_CONTROL_STORE` setting.

The lease is changed by compare-and-swap, never under a lock: every change writes the next
*version* of the lease, and only if no other change wrote it first (`swap_lease`). A writer paused
anywhere (a GC or VM pause, a frozen container) therefore blocks no one, and what it writes when it
wakes up on a version it read before is refused. The file store keeps the versions as files
`control/<P>/lease/<version>.json`, each created exclusively (`link(2)` fails when the name
exists); the newest is the lease. The PostgreSQL store keeps a version column, changed by a
conditional upsert. What a lease means (who may take it, fencing, renewal) is decided in
`spark_jobs.control.lease`, the same for both stores.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spark_jobs.files import create_exclusively, replace_atomically
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
LEASE = "lease"                      # not a document: kept apart, changed by `swap_lease`
PRIVATE_FILE = 0o600                 # a launch record holds a command line
SCHEMA = "weir_control"


def write_json_atomically(path: Path, payload: dict[str, Any], mode: int | None = None) -> None:
    """Replace `path` with `payload` as JSON, whole (`files.replace_atomically`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, json.dumps(payload, sort_keys=True).encode(), mode)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@dataclass
class LeaseSlot:
    """A pipeline's lease as read from the store: the record (live or stale, as a dict), the
    highest fencing token ever handed out and the lease's version (0: never written). `put`/`clear`
    stage a change; `ControlStore.swap_lease` writes it only if the version is still the one read."""

    current: dict[str, Any] | None
    last_fencing_token: int
    version: int = 0
    written: dict[str, Any] | None = None
    cleared: bool = False

    @property
    def changed(self) -> bool:
        return self.written is not None or self.cleared

    def put(self, record: dict[str, Any]) -> None:
        self.written, self.cleared = record, False
        self.last_fencing_token = max(self.last_fencing_token, int(record.get("fencing_token") or 0))

    def clear(self) -> None:
        self.written, self.cleared = None, True


class ControlStore(Protocol):
    """A pipeline's control state. Documents (`KINDS`) are whole JSON objects, replaced at once."""

    def read_lease(self, pipeline: str) -> dict[str, Any] | None:
        """The lease record (live or stale), if any."""
        ...

    def lease_slot(self, pipeline: str) -> LeaseSlot:
        """The lease as it is now, with its version: what a change is decided on."""
        ...

    def swap_lease(self, pipeline: str, slot: LeaseSlot) -> bool:
        """Write the change staged in `slot` as the lease's next version, unless another change
        was written since `slot` was read: True when it was written, False when it lost."""
        ...

    def get(self, pipeline: str, kind: str) -> dict[str, Any] | None: ...

    def put(self, pipeline: str, kind: str, document: dict[str, Any]) -> None: ...

    def delete(self, pipeline: str, kind: str) -> None: ...

    def describe(self, pipeline: str, kind: str) -> str:
        """Where the document is kept, for messages and runbooks."""
        ...


# The file store keeps this many of a lease's newest versions (older ones are removed).
LEASE_VERSIONS_KEPT = 16


@dataclass(frozen=True)
class FileStore:
    """The embedded default: JSON files under `WEIR_HOME/control/<P>/`, the lease's versions under
    `control/<P>/lease/`."""

    home: WeirHome

    def path(self, pipeline: str, kind: str) -> Path:
        return self.home.control(pipeline) / f"{kind}.json"

    def lease_folder(self, pipeline: str) -> Path:
        return self.home.control(pipeline) / "lease"

    def _lease_versions(self, pipeline: str) -> list[int]:
        try:
            names = os.listdir(self.lease_folder(pipeline))
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def _version_path(self, pipeline: str, version: int) -> Path:
        return self.lease_folder(pipeline) / f"{version:020d}.json"

    def read_lease(self, pipeline: str) -> dict[str, Any] | None:
        return self.lease_slot(pipeline).current

    def lease_slot(self, pipeline: str) -> LeaseSlot:
        while True:
            versions = self._lease_versions(pipeline)
            if not versions:
                return LeaseSlot(None, 0, 0)
            try:
                text = self._version_path(pipeline, versions[-1]).read_text(encoding="utf-8")
            except FileNotFoundError:
                continue  # removed as an old version after the listing: list again
            document = json.loads(text)
            return LeaseSlot(document.get("record"), int(document.get("fencing_token") or 0),
                             versions[-1])

    def swap_lease(self, pipeline: str, slot: LeaseSlot) -> bool:
        """Create the next version's file exclusively: a complete temporary file linked to its
        name, which fails when that version exists. A writer that slept through many changes can
        still create a name that was removed as old: its file is then not the newest, so it is
        taken back and the swap counts as lost (the newest version is never removed, and no
        version is created without its predecessor having been the newest)."""
        version = slot.version + 1
        target = self._version_path(pipeline, version)
        target.parent.mkdir(parents=True, exist_ok=True)
        document = {"pipeline": pipeline, "version": version,
                    "record": None if slot.cleared else slot.written,
                    "fencing_token": slot.last_fencing_token}
        if not create_exclusively(target, json.dumps(document, sort_keys=True).encode()):
            return False
        versions = self._lease_versions(pipeline)
        if not versions or versions[-1] != version:
            target.unlink(missing_ok=True)
            return False
        for old in versions:
            if old > version - LEASE_VERSIONS_KEPT:
                break
            self._version_path(pipeline, old).unlink(missing_ok=True)
        return True

    def get(self, pipeline: str, kind: str) -> dict[str, Any] | None:
        return read_json(self.path(pipeline, kind))

    def put(self, pipeline: str, kind: str, document: dict[str, Any]) -> None:
        write_json_atomically(self.path(pipeline, kind), document, mode=PRIVATE_FILE)

    def delete(self, pipeline: str, kind: str) -> None:
        self.path(pipeline, kind).unlink(missing_ok=True)

    def describe(self, pipeline: str, kind: str) -> str:
        return str(self.lease_folder(pipeline) if kind == LEASE else self.path(pipeline, kind))


_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.leases (
    pipeline text PRIMARY KEY,
    record jsonb,                                -- the holder, NULL once given back
    fencing_token bigint NOT NULL DEFAULT 0,     -- the highest token handed out; never goes down
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- bumped by every change of the lease: a change is written only on the version it was decided on
ALTER TABLE {SCHEMA}.leases ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0;
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
        return self.lease_slot(pipeline).current

    def lease_slot(self, pipeline: str) -> LeaseSlot:
        with self._cursor() as cur:
            cur.execute(f"SELECT record, fencing_token, version FROM {SCHEMA}.leases "
                        "WHERE pipeline = %s", (pipeline,))
            row = cur.fetchone()
        return LeaseSlot(row[0], int(row[1]), int(row[2])) if row else LeaseSlot(None, 0, 0)

    def swap_lease(self, pipeline: str, slot: LeaseSlot) -> bool:
        """One statement, no transaction held open: a row of version 0 is inserted or a row still
        at the version read is updated; a concurrent swap waits for the row and then finds its
        version changed."""
        from psycopg2.extras import Json

        with self._cursor() as cur:
            cur.execute(
                f"INSERT INTO {SCHEMA}.leases AS l (pipeline, record, fencing_token, version) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (pipeline) DO UPDATE SET "
                "record = EXCLUDED.record, version = EXCLUDED.version, updated_at = now(), "
                "fencing_token = GREATEST(l.fencing_token, EXCLUDED.fencing_token) "
                "WHERE l.version = %s",
                (pipeline, None if slot.cleared else Json(slot.written),
                 slot.last_fencing_token, slot.version + 1, slot.version))
            return cur.rowcount == 1

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
        if kind == LEASE:
            return f"{SCHEMA}.leases ({pipeline}) in postgresql://{where}"
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
