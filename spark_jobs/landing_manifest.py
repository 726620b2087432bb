"""The landing manifest: the append-only list of files the landing reader (`spark_jobs.landing`)
has discovered, and positions in it. Pure Python (no Spark), so checkpoint tools read it too.

An entry is one version of a landing file: path, size, modification time and a digest of the
whole content. A path not in the manifest, or whose (size, mtime) differs from its latest entry,
becomes a new entry (a re-dropped file is new content). New files are ordered by (mtime, name);
the modification time never decides whether a file is read. The manifest is persisted (temp
file + no-clobber link, fsync) before an offset refers to its entries, so a restarted query sees
the very same file order; its random `id`, carried by every offset, ties a checkpoint to it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_jobs.files import create_exclusively

MANIFEST_VERSION = 1
DIGEST_HEX_IN_SOURCE = 12
START_FILE = "start.json"
_HASH_BLOCK = 1 << 20


class LandingError(RuntimeError):
    """A condition under which reading on would lose or invent data: the query must stop."""


# --------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileEntry:
    """One discovered version of a landing file."""

    path: str  # absolute, as listed
    size: int
    mtime_ns: int
    digest: str  # blake2b-128 hex of the whole content

    @property
    def source(self) -> str:
        return f"{Path(self.path).as_uri()}#{self.digest[:DIGEST_HEX_IN_SOURCE]}"


def _write_new_file(final: Path, payload: bytes) -> None:
    """Write `final` atomically and only if it does not exist yet."""
    if not create_exclusively(final, payload):
        raise LandingError(
            f"manifest segment {final} already exists: another query writes the same manifest")


class Manifest:
    """The append-only list of discovered files, persisted as immutable segment files
    ``seg-<first index>.json`` (one per discovery round that found something) next to a
    ``meta.json`` that pins the landing folder and gives the manifest a random `id`, which every
    offset carries: a checkpoint paired with another manifest (lost, recreated, copied from
    elsewhere) fails loudly instead of reading another file order."""

    def __init__(self, directory: Path, landing: Path) -> None:
        self.directory = directory
        self.landing = landing
        self.id = ""
        self.start = 0
        self.entries: list[FileEntry] = []
        self._latest: dict[str, FileEntry] = {}
        self._load()

    def _load(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        meta_path = self.directory / "meta.json"
        meta = {"version": MANIFEST_VERSION, "landing": str(self.landing)}
        if not meta_path.exists():
            try:
                _write_new_file(meta_path, json.dumps(meta | {"id": uuid.uuid4().hex}).encode())
            except LandingError:
                pass  # written concurrently; checked below
        found = json.loads(meta_path.read_text())
        if {k: found.get(k) for k in meta} != meta:
            raise LandingError(f"manifest {self.directory} belongs to {found}, not to {meta}")
        self.id = found["id"]
        start = self.directory / START_FILE
        self.start = int(json.loads(start.read_text())["file"]) if start.is_file() else 0
        segments = sorted(p for p in self.directory.glob("seg-*.json"))
        for seg in segments:
            first = int(seg.stem.split("-", 1)[1])
            if first != len(self.entries):
                raise LandingError(
                    f"manifest {self.directory} is not contiguous: {seg.name} starts at {first}, "
                    f"{len(self.entries)} entries before it"
                )
            body = json.loads(seg.read_text())
            for raw in body["entries"]:
                self._add(FileEntry(**raw))

    def _add(self, entry: FileEntry) -> None:
        self.entries.append(entry)
        self._latest[entry.path] = entry

    def latest(self, path: str) -> FileEntry | None:
        return self._latest.get(path)

    def append(self, new: Sequence[FileEntry]) -> None:
        """Persist `new` as one segment, then make it visible in memory."""
        if not new:
            return
        seg = self.directory / f"seg-{len(self.entries):010d}.json"
        body = {"entries": [dataclasses.asdict(e) for e in new]}
        _write_new_file(seg, json.dumps(body, separators=(",", ":")).encode())
        for e in new:
            self._add(e)

    def __len__(self) -> int:
        return len(self.entries)


def file_digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb", buffering=0) as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def discover(manifest: Manifest) -> list[FileEntry]:
    """List the landing folder and append new or changed files to the manifest (persisted
    before returning). A file that changes while it is being hashed is left for the next
    round; mtime orders new files but never excludes one."""
    candidates: list[tuple[int, str, os.stat_result]] = []
    with os.scandir(manifest.landing) as it:
        for d in it:
            if d.name.startswith((".", "_")) or not d.is_file(follow_symlinks=True):
                continue
            st = d.stat(follow_symlinks=True)
            known = manifest.latest(d.path)
            if known is None or (known.size, known.mtime_ns) != (st.st_size, st.st_mtime_ns):
                candidates.append((st.st_mtime_ns, d.name, st))
    new: list[FileEntry] = []
    for mtime_ns, name, st in sorted(candidates, key=lambda c: (c[0], c[1])):
        path = str(manifest.landing / name)
        try:
            digest = file_digest(path)
            after = os.stat(path)
        except FileNotFoundError:
            continue  # removed meanwhile; nothing to read
        if (after.st_size, after.st_mtime_ns) != (st.st_size, mtime_ns):
            continue  # still changing: next round
        new.append(FileEntry(path, st.st_size, mtime_ns, digest))
    manifest.append(new)
    return new


# --------------------------------------------------------------------------------------------
# Offsets and planning
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Position:
    """All entries before `file` are read, entry `file` up to `byte`. Canonical form: a fully
    read entry is expressed as the start of the next one. As a Spark offset (JSON, compared as
    a string by the engine): ``{"manifest": id, "file": i, "byte": b}``."""

    file: int
    byte: int

    def to_offset(self, manifest_id: str) -> dict[str, Any]:
        return {"manifest": manifest_id, "file": self.file, "byte": self.byte}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Position:
        return cls(int(offset["file"]), int(offset["byte"]))


def advance(entries: Sequence[FileEntry], start: Position, stop: Position,
            max_bytes: int | None) -> Position:
    """The furthest position from `start` towards `stop` covering at most `max_bytes` file bytes
    (`None`: no bound). May end inside a file; lines are assigned by the reader, not here."""
    pos, budget = start, max_bytes
    while pos < stop:
        entry = entries[pos.file]
        end_byte = entry.size if pos.file < stop.file else stop.byte
        remaining = end_byte - pos.byte
        if budget is not None and remaining > budget:
            return Position(pos.file, pos.byte + budget) if budget > 0 else pos
        if budget is not None:
            budget -= remaining
        pos = Position(pos.file + 1, 0) if end_byte >= entry.size else Position(pos.file, end_byte)
    return pos



def read_entries(directory: Path) -> list[FileEntry]:
    """The manifest's entries, read without checking its landing folder (inspection)."""
    entries: list[FileEntry] = []
    for seg in sorted(directory.glob("seg-*.json")):
        entries += [FileEntry(**raw) for raw in json.loads(seg.read_text())["entries"]]
    return entries


def manifest_dir(ingest_checkpoint: Path) -> Path:
    """Where the ingest query of a checkpoint keeps its manifest: inside the checkpoint, so a
    backup, restore or reset carries the file order with the offsets that refer to it."""
    return ingest_checkpoint / "landing"


def seed(directory: Path, landing: Path, skipped: Sequence[Path]) -> None:
    """A fresh manifest for a checkpoint reset: `skipped` files are entries already behind the
    start, so the new checkpoint reads only what follows them (and files arriving later)."""
    manifest = Manifest(directory, landing.absolute())
    if len(manifest):
        raise LandingError(f"manifest {directory} is not fresh: a reset seeds an empty one")
    entries = []
    for path in sorted(skipped, key=lambda f: (f.stat().st_mtime_ns, f.name)):
        st = path.stat()
        entries.append(FileEntry(str(landing.absolute() / path.name), st.st_size, st.st_mtime_ns,
                                 file_digest(str(path))))
    manifest.append(entries)
    _write_new_file(directory / START_FILE, json.dumps({"file": len(entries)}).encode())
