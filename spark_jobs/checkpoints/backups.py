"""Checkpoint backups: `backups/<P>/<id>/` holds a copy of every query's checkpoint and a
`manifest.json` (time, batch of each query, Delta table versions, size, why it was taken).

A backup is consistent even while the stream runs: checkpoint files are immutable once
renamed into place, so copying each query up to its last committed batch (and state up to the
version that batch produced) gives a batch boundary. Table versions are read *after* the
batch ids, so they contain at least everything those batches wrote; anything newer is written
again, idempotently by record identity, when the stream replays from the backup.

A backup is built in a hidden `.<id>.partial` folder and renamed into place with its manifest,
so a backup that exists is complete.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs import topology
from spark_jobs.checkpoints import layout
from spark_jobs.layers import PipelineTables
from spark_jobs.tables import delta_version

if TYPE_CHECKING:
    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
BACKUP_ID = re.compile(r"^\d{8}T\d{9}Z-[0-9a-f]{6}$")
Progress = Callable[[int, int], None]


class BackupNotFoundError(LookupError):
    pass


@dataclass
class QueryCopy:
    """One query's checkpoint inside a backup."""

    batch: int | None
    files: int = 0
    bytes: int = 0


@dataclass
class Manifest:
    id: str
    pipeline: str
    created_at: str
    kind: str
    queries: dict[str, QueryCopy] = field(default_factory=dict)
    table_versions: dict[str, int | None] = field(default_factory=dict)
    generation: int = 0
    actor: str | None = None
    reason: str | None = None

    @property
    def bytes(self) -> int:
        return sum(q.bytes for q in self.queries.values())

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["bytes"] = self.bytes
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        queries = {name: QueryCopy(**q) for name, q in data.get("queries", {}).items()}
        return cls(id=data["id"], pipeline=data["pipeline"], created_at=data["created_at"],
                   kind=data.get("kind", "manual"), queries=queries,
                   table_versions=dict(data.get("table_versions", {})),
                   generation=int(data.get("generation", 0)), actor=data.get("actor"),
                   reason=data.get("reason"))


def new_backup_id(now: dt.datetime | None = None) -> str:
    """Sortable by time, to the millisecond: `20261120T230501123Z-1a2b3c`."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z-{uuid.uuid4().hex[:6]}"


def table_versions(home: WeirHome, pipeline: Pipeline) -> dict[str, int | None]:
    return {layer: delta_version(path) for layer, path in PipelineTables.of(home, pipeline).named().items()}


def _files_to_copy(source: Path, up_to_batch: int | None) -> list[Path]:
    """Relative paths of a query's checkpoint files as of the end of `up_to_batch`
    (None: every file but temporaries, for a stopped stream's safety copy)."""
    out = []
    for entry in source.rglob("*"):
        if not entry.is_file():
            continue
        relative = entry.relative_to(source)
        if up_to_batch is None:
            if not layout.is_temporary(entry.name):
                out.append(relative)
        elif layout.needed_for(relative, up_to_batch):
            out.append(relative)
    return sorted(out)


def copy_files(source: Path, target: Path, files: list[Path], progress: Progress | None = None,
               done: int = 0, total: int = 0) -> tuple[int, int]:
    """Copy `files` (relative to `source`) into `target`; a file Spark purged meanwhile (older
    than what the copy needs) is skipped. Returns (files, bytes) copied."""
    count = size = 0
    for relative in files:
        src, dst = source / relative, target / relative
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(src, dst)
        except FileNotFoundError:
            log.debug("skipped %s: removed while copying (purged by Spark)", src)
            continue
        count += 1
        size += dst.stat().st_size
        if progress is not None:
            progress(done + size, total)
    return count, size


def take_backup(home: WeirHome, pipeline: Pipeline, *, kind: str = "manual", whole: bool = False,
                actor: str | None = None, reason: str | None = None, generation: int = 0,
                progress: Progress | None = None) -> Manifest:
    """Copy every query's checkpoint into a new backup and return its manifest. `whole` copies
    every file as it is (for a stopped stream, before a destructive change, even when the
    checkpoint is damaged); otherwise each query is cut at its last committed batch."""
    backup_id = new_backup_id()
    folder = home.confine(home.backups(pipeline.name))
    partial = folder / f".{backup_id}.partial"
    partial.mkdir(parents=True)
    plans: dict[str, tuple[Path, int | None, list[Path]]] = {}
    for query in topology.QUERIES:
        source = topology.checkpoint_location(home, pipeline, query)
        if not source.is_dir():
            continue
        batch = layout.last_committed(source)
        plans[query] = (source, batch, _files_to_copy(source, None if whole else batch))
    versions = table_versions(home, pipeline)        # after the batch ids: see the module docstring
    total = sum((src / f).stat().st_size for src, _, files in plans.values() for f in files
                if (src / f).exists())
    manifest = Manifest(backup_id, pipeline.name, _now_iso(), kind, table_versions=versions,
                        generation=generation, actor=actor, reason=reason)
    done = 0
    try:
        for query, (source, batch, files) in plans.items():
            count, size = copy_files(source, partial / "checkpoints" / query, files, progress, done, total)
            done += size
            manifest.queries[query] = QueryCopy(batch, count, size)
        (partial / MANIFEST).write_text(json.dumps(manifest.as_dict(), indent=2, sort_keys=True))
        os.replace(partial, folder / backup_id)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("%s backup %s (%s): batches %s, table versions %s, %d bytes", pipeline.name, backup_id,
             kind, {q: c.batch for q, c in manifest.queries.items()}, versions, manifest.bytes)
    return manifest


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def list_backups(home: WeirHome, pipeline: str) -> list[Manifest]:
    """Complete backups of `pipeline`, oldest first."""
    folder = home.backups(pipeline)
    if not folder.is_dir():
        return []
    out = []
    for entry in sorted(folder.iterdir()):
        manifest = entry / MANIFEST
        if entry.is_dir() and BACKUP_ID.match(entry.name) and manifest.is_file():
            try:
                out.append(Manifest.from_dict(json.loads(manifest.read_text())))
            except (ValueError, KeyError, TypeError) as err:
                log.warning("%s: unreadable backup manifest %s: %s", pipeline, manifest, err)
    return sorted(out, key=lambda m: (m.created_at, m.id))


def find_backup(home: WeirHome, pipeline: str, backup_id: str) -> tuple[Manifest, Path]:
    """The backup `backup_id` (or `latest`), confined to WEIR_HOME."""
    known = list_backups(home, pipeline)
    if backup_id == "latest":
        if not known:
            raise BackupNotFoundError(f"{pipeline} has no backups yet")
        backup_id = known[-1].id
    if not BACKUP_ID.match(backup_id):
        raise BackupNotFoundError(
            f"not a backup id: {backup_id!r} (see `weir checkpoint backups {pipeline}`)")
    path = home.confine(home.backups(pipeline) / backup_id)
    for manifest in known:
        if manifest.id == backup_id:
            return manifest, path
    raise BackupNotFoundError(
        f"no backup {backup_id} of {pipeline} (see `weir checkpoint backups {pipeline}`)")


def remove_backup(home: WeirHome, pipeline: str, backup_id: str) -> None:
    path = home.confine(home.backups(pipeline) / backup_id)
    shutil.rmtree(path)
    log.info("%s backup %s removed", pipeline, backup_id)
