"""Reading a Structured Streaming checkpoint on disk, without a JVM.

A query's checkpoint folder holds `metadata` (the query id), `offsets/N` (batch N planned: the
source positions and the settings pinned for the query's life), `commits/N` (batch N done),
`sources/<i>/N[.compact]` (the file source's log of files seen) and `state/<op>/<partition>/`
(state store versions; version V is the state after batch V-1). Every file is written once
(to a temporary name, then renamed), which is what lets a backup copy a running checkpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")
STATE_FILE = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(changelog|zip|delta|snapshot)$")
CRC_FILE = re.compile(r"^\.(.+)\.crc$")
TEMP_MARKERS = (".tmp", "_temporary", ".inprogress")

def is_temporary(name: str) -> bool:
    """A half-written file: Hadoop's checkpoint file manager writes `.<name>.<uuid>.tmp` and
    renames it; one left behind is a crash mid-write."""
    return any(marker in name for marker in TEMP_MARKERS)


def clear_interrupted_writes(query: Path) -> list[Path]:
    """Delete the half-written files a crash left in `query`'s offsets and commits logs and
    return them. Harmless to Spark's recovery, which ignores them, except on the very first
    batch: Spark 4.2 refuses to start a stateful query whose offsets folder is not empty before
    batch 0 (SPARK-53103), so a driver killed while planning its first batch could never restart.
    Only the lease holder may call this (no other writer can be mid-write)."""
    removed = []
    for log in ("offsets", "commits"):
        folder = query / log
        if folder.is_dir():
            for entry in folder.iterdir():
                if entry.is_file() and is_temporary(entry.name):
                    entry.unlink()
                    removed.append(entry)
    return removed


class LogFileError(ValueError):
    """An offsets/commits/sources file that is empty or cannot be parsed."""


def read_log_file(path: Path) -> list[str]:
    """The lines of a metadata-log file (`v1` then JSON lines); `LogFileError` when empty or
    malformed."""
    data = path.read_bytes()
    if not data:
        raise LogFileError("empty file (0 bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise LogFileError("not UTF-8 text") from None
    lines = text.split("\n")
    if not re.fullmatch(r"v\d+", lines[0].strip()):
        raise LogFileError(f"no version header (first line {lines[0][:40]!r})")
    body = [line for line in lines[1:] if line.strip()]
    for line in body:
        try:
            json.loads(line)
        except json.JSONDecodeError:
            raise LogFileError(f"unparseable JSON line {line[:60]!r}") from None
    return body


def batch_ids(folder: Path) -> list[int]:
    """The batch ids of a log folder (`offsets`, `commits`), ascending."""
    if not folder.is_dir():
        return []
    ids = []
    for entry in folder.iterdir():
        match = BATCH_FILE.match(entry.name)
        if match and entry.is_file() and not match.group(2):
            ids.append(int(match.group(1)))
    return sorted(ids)


def last_readable(folder: Path) -> tuple[int, list[str]] | None:
    """The newest batch of a log folder whose file parses, with its lines."""
    for batch in reversed(batch_ids(folder)):
        try:
            return batch, read_log_file(folder / str(batch))
        except (LogFileError, OSError):
            continue
    return None


def last_committed(query: Path) -> int | None:
    """The newest batch id whose `commits/N` is readable, i.e. the last batch boundary."""
    found = last_readable(query / "commits")
    return found[0] if found else None


@dataclass
class OffsetEntry:
    """One `offsets/N` file: the batch's watermark and time, the pinned settings, one position
    per source."""

    batch: int
    watermark_ms: int | None
    timestamp_ms: int | None
    conf: dict[str, str]
    sources: list[Any] = field(default_factory=list)


def read_offsets(query: Path, batch: int) -> OffsetEntry:
    lines = read_log_file(query / "offsets" / str(batch))
    meta = json.loads(lines[0]) if lines else {}
    sources = [json.loads(line) if line != "-" else None for line in lines[1:]]
    return OffsetEntry(batch, meta.get("batchWatermarkMs"), meta.get("batchTimestampMs"),
                       {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}, sources)


def folder_size(folder: Path) -> tuple[int, int]:
    """(files, bytes) under `folder`."""
    count = size = 0
    if folder.exists():
        for entry in folder.rglob("*"):
            if entry.is_file():
                count += 1
                size += entry.stat().st_size
    return count, size


def state_partitions(operator: Path) -> list[int]:
    """The partitions of a state operator: from its operator metadata, else its folders."""
    meta = operator / "_metadata" / "metadata"
    if meta.is_file():
        try:
            lines = read_log_file(meta)
            info = json.loads(lines[0]).get("stateStoreInfo") or []
            if info:
                return list(range(int(info[0]["numPartitions"])))
        except (LogFileError, OSError, KeyError, ValueError):
            pass
    return sorted(int(p.name) for p in operator.iterdir() if p.is_dir() and p.name.isdigit())


def operator_name(operator: Path) -> str | None:
    """The physical operator that wrote a state operator's folder (`stateStoreSave`,
    `transformWithStateExec`, ...), from its operator metadata: `_metadata/metadata` (v1) or the
    newest `_metadata/v2/<batch>`. None when neither is readable."""
    v2 = operator / "_metadata" / "v2"
    newest = max(batch_ids(v2), default=None) if v2.is_dir() else None
    for meta in (operator / "_metadata" / "metadata",
                 *(() if newest is None else (v2 / str(newest),))):
        try:
            return str(json.loads(read_log_file(meta)[0])["operatorInfo"]["operatorName"])
        except (LogFileError, OSError, KeyError, ValueError, IndexError):
            continue
    return None


def state_operators(query: Path) -> list[Path]:
    state = query / "state"
    if not state.is_dir():
        return []
    return sorted((p for p in state.iterdir() if p.is_dir() and p.name.isdigit()),
                  key=lambda p: int(p.name))


def state_versions(partition: Path) -> set[int]:
    """State versions a partition folder holds (changelog, RocksDB zip, HDFS delta/snapshot)."""
    if not partition.is_dir():
        return set()
    return {int(m.group(1)) for m in (STATE_FILE.match(e.name) for e in partition.iterdir()) if m}


def needed_for(relative: Path, up_to_batch: int) -> bool:
    """Whether a checkpoint file belongs to the checkpoint as of the end of `up_to_batch`:
    batch-numbered files of later batches and state versions after `up_to_batch + 1` do not,
    nor do temporaries. Everything else (metadata, schemas, RocksDB SST files) does."""
    name = relative.name
    crc = CRC_FILE.match(name)
    if crc:
        name = crc.group(1)
    if is_temporary(name):
        return False
    parts = relative.parts
    if parts[0] in ("offsets", "commits") or (parts[0] == "sources" and len(parts) == 3):
        match = BATCH_FILE.match(name)
        return match is None or int(match.group(1)) <= up_to_batch
    if parts[0] == "state":
        match = STATE_FILE.match(name)
        return match is None or int(match.group(1)) <= up_to_batch + 1
    return True
