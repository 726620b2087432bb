"""The landing source: a bounded, splittable streaming read of the JSON-lines files of one
landing folder, line by line, in micro-batches of bounded size.

The lines are read in the JVM (`infra/jvm/weir/LandingSource.java`); this module is its driver
side, the `LandingPlanner` it calls through py4j (`read_stream` wires the two):

* **Offsets** are a position in an append-only *manifest* of discovered files:
  ``{"manifest": id, "file": i, "byte": b}`` — every manifest entry before ``i`` is fully read,
  entry ``i`` up to byte ``b``. The manifest (path, size, mtime_ns, blake2b digest per entry,
  `spark_jobs.landing_manifest`) lives in the folder given as ``manifest`` and is persisted
  (temp file + no-clobber link, fsync) *before* ``latestOffset`` returns an offset that refers to
  its new entries, so a restarted query sees the very same file order. The random manifest ``id``
  in every offset ties the checkpoint to its manifest.
* **Discovery** lists the folder (names starting with ``.`` or ``_`` are ignored: writers write
  there and rename when complete). A path that is not in the manifest, or whose ``(size,
  mtime_ns)`` differs from its latest entry, becomes a new entry — a re-dropped file is new
  content. New files are ordered by ``(mtime_ns, name)``. The modification time never decides
  *whether* a file is read (no max-age cut-off), only the order.
* **Admission control**: the default read limit is ``maxBytesPerTrigger``; one file larger than
  the bound is split over several micro-batches. ``Trigger.AvailableNow`` is supported: the
  target is fixed when the trigger starts and reached in bounded batches.
* **Partitions** are byte ranges of at most ``maxBytesPerPartition``, cut across file boundaries
  (consecutive small files share a partition, a large file spans several). A batch is cut into at
  least as many tasks as the JVM side asks for (the cluster's cores, as Spark's own file source
  plans), each of at least ``minBytesPerPartition``, and evenly: a running stream's small batches
  are parsed on every core, not on one.
* **Lines** follow Hadoop's ``LineRecordReader`` convention, so a line's identity does not depend
  on where batch or partition boundaries fall: the range ``[a, b)`` owns exactly the lines whose
  first byte lies in ``[a, b)``. A task fails when a file's size or modification time is not the
  manifest's any more (changed after discovery) rather than emit a mix.

Rows (`LandingSource.SCHEMA`)::

    source   string  not null  file URI + '#' + first 12 hex chars of the file's blake2b digest
    position bigint  not null  byte offset of the line's first byte in the file (the first line
                               is at 0 even when a UTF-8 BOM precedes its text)
    value    string            the line: no '\\n', no trailing '\\r', no BOM; bytes that are not
                               valid UTF-8 are decoded with U+FFFD replacement characters; of a
                               line longer than ``maxLineBytes``, its first ``maxLineBytes`` bytes
                               (cut back to a character's start)
    raw      binary            the line's bytes (same slice as value) only when they are not
                               valid UTF-8, else null
    line_bytes bigint          the whole line's length in bytes (without its '\\n') only when
                               value holds its first bytes only, else null

A task holds its byte range and at most ``maxLineBytes`` of one line, whatever a file holds: a
file without line breaks (a binary, a dump dropped by mistake) is one line, cut, and the rest of
it read only to find where it ends. ``maxLineBytes`` (`transforms.MAX_LINE_BYTES` by default) is
more than the longest line the contract accepts, so a cut line is one the parse refuses.

``(source, position)`` is unique and stable: the same content at the same path always yields the
same identities (the digest is of the content), so a replayed batch can be deduplicated by it.

A checkpoint reset seeds a fresh manifest (`seed`): the files to skip as entries, and a
``start.json`` naming the first entry to read, which ``initialOffset`` starts from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from spark_jobs.landing_manifest import (
    FileEntry,
    LandingError,
    Manifest,
    Position,
    advance,
    discover,
)

if TYPE_CHECKING:
    import threading

    from pyspark.sql import DataFrame, SparkSession

JVM_SOURCE = "weir.LandingSource"
DEFAULT_MAX_BYTES_PER_TRIGGER = 128 << 20
DEFAULT_MAX_BYTES_PER_PARTITION = 16 << 20
# A task this small parses in well under a tenth of a second: cutting a batch finer only writes
# more files per table and batch.
DEFAULT_MIN_BYTES_PER_PARTITION = 1 << 20

@dataclass(frozen=True)
class FileRange:
    """Bytes `[start, end)` of one manifest entry; owns the lines that begin inside."""

    entry: FileEntry
    start: int
    end: int


@dataclass(frozen=True)
class LandingPartition:
    """One task's work: consecutive file ranges, together at most `maxBytesPerPartition`."""

    ranges: tuple[FileRange, ...]


def plan_partitions(entries: Sequence[FileEntry], start: Position, end: Position, *,
                    max_bytes: int, min_bytes: int = 1, min_partitions: int = 1) -> list[LandingPartition]:
    """The tasks reading `(start, end]`: its bytes, in manifest order, cut into equal ranges. As
    few as keep each within `max_bytes`, and at least `min_partitions` as long as each holds
    `min_bytes` (a batch of a few hundred kilobytes is one task, however many cores there are)."""
    ranges: list[FileRange] = []
    for i in range(start.file, min(end.file + 1, len(entries))):
        entry = entries[i]
        a = start.byte if i == start.file else 0
        b = end.byte if i == end.file else entry.size
        if a < b:  # empty files and empty ranges own no line
            ranges.append(FileRange(entry, a, b))
    total = sum(r.end - r.start for r in ranges)
    if not total:
        return []
    count = max(-(-total // max_bytes), min(min_partitions, total // min_bytes), 1)
    size = -(-total // count)
    parts: list[LandingPartition] = []
    group: list[FileRange] = []
    room = size
    for r in ranges:
        a = r.start
        while a < r.end:
            step = min(r.end, a + room)
            group.append(FileRange(r.entry, a, step))
            room -= step - a
            a = step
            if not room:
                parts.append(LandingPartition(tuple(group)))
                group, room = [], size
    if group:
        parts.append(LandingPartition(tuple(group)))
    return parts


def _size_option(options: Mapping[str, str], key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    units = {"k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
    for suffix, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if text.endswith(suffix):
            value = int(float(text[: -len(suffix)]) * factor)
            break
    else:
        value = int(text)
    if value <= 0:
        raise ValueError(f"option {key} must be positive, got {raw!r}")
    return value


class LandingPlanner:
    """The driver side of the landing source (`weir.LandingPlanner`, called by the JVM through
    py4j): the manifest, offsets, admission control and each task's byte ranges. Offsets cross as
    JSON strings. The manifest is loaded on first use. Once `stopping` is set (the driver stops at
    a batch boundary), no further batch is planned: the one in flight is the last."""

    def __init__(self, options: Mapping[str, str], stopping: threading.Event | None = None) -> None:
        path = options.get("path")
        manifest = options.get("manifest")
        if not path or not manifest:
            raise ValueError("the landing source needs options 'path' and 'manifest'")
        self.landing = Path(path).absolute()
        self.manifest_dir = Path(manifest).absolute()
        self.max_bytes_per_trigger = _size_option(
            options, "maxBytesPerTrigger", DEFAULT_MAX_BYTES_PER_TRIGGER)
        self.max_bytes_per_partition = _size_option(
            options, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION)
        if self.max_bytes_per_partition > 1 << 30:  # a task's range is held in one JVM byte array
            raise ValueError("the landing source's maxBytesPerPartition must be at most 1g")
        self.min_bytes_per_partition = min(self.max_bytes_per_partition, _size_option(
            options, "minBytesPerPartition", DEFAULT_MIN_BYTES_PER_PARTITION))
        files = options.get("maxFilesPerTrigger")
        self.max_files_per_trigger = int(files) if files else None
        self._manifest: Manifest | None = None
        self._target: Position | None = None  # set by prepareForTriggerAvailableNow
        self.stopping = stopping

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            if not self.landing.is_dir():
                raise LandingError(f"landing folder {self.landing} does not exist")
            self._manifest = Manifest(self.manifest_dir, self.landing)
        return self._manifest

    def _checked(self, offset: Mapping[str, Any]) -> Position:
        pos = Position.from_offset(offset)
        n = len(self.manifest)
        entries = self.manifest.entries
        if offset.get("manifest") != self.manifest.id or pos.file > n or pos.byte < 0 or (
                pos.file < n and pos.byte > entries[pos.file].size) or (
                pos.file == n and pos.byte != 0):
            raise LandingError(
                f"offset {offset} does not fit manifest {self.manifest_dir} (id {self.manifest.id}, "
                f"{n} entries): the manifest does not belong to this checkpoint")
        return pos

    def _offset(self, pos: Position) -> str:
        return json.dumps(pos.to_offset(self.manifest.id))

    def maxBytesPerTrigger(self) -> int:
        return self.max_bytes_per_trigger

    def initialOffset(self) -> str:
        return self._offset(Position(self.manifest.start, 0))

    def prepareForTriggerAvailableNow(self) -> None:
        discover(self.manifest)
        self._target = Position(len(self.manifest), 0)

    def latestOffset(self, start: str, max_bytes: int) -> str:
        """The end of the next micro-batch: at most `max_bytes` after `start` (negative: all);
        `start` itself (no batch) once the driver is stopping."""
        begin = self._checked(json.loads(start))
        if self.stopping is not None and self.stopping.is_set():
            return self._offset(begin)
        if self._target is None:
            discover(self.manifest)  # persisted before the offset below can refer to it
        stop = self._target or Position(len(self.manifest), 0)
        if self.max_files_per_trigger:
            stop = min(stop, Position(begin.file + self.max_files_per_trigger, 0))
        return self._offset(advance(self.manifest.entries, begin, stop,
                                    None if max_bytes < 0 else max_bytes))

    def reportLatestOffset(self) -> str | None:
        if self._manifest is None:
            return None
        return self._offset(self._target or Position(len(self.manifest), 0))

    def partitions(self, start: str, end: str, min_partitions: int) -> str:
        begin, stop = self._checked(json.loads(start)), self._checked(json.loads(end))
        parts = plan_partitions(self.manifest.entries, begin, stop,
                                max_bytes=self.max_bytes_per_partition,
                                min_bytes=self.min_bytes_per_partition, min_partitions=min_partitions)
        return json.dumps([[{"path": r.entry.path, "source": r.entry.source, "size": r.entry.size,
                             "mtime_ns": r.entry.mtime_ns, "start": r.start, "end": r.end}
                            for r in part.ranges] for part in parts])

    class Java:
        implements: ClassVar[list[str]] = ["weir.LandingPlanner"]


def read_stream(spark: SparkSession, options: Mapping[str, str],
                stopping: threading.Event | None = None) -> DataFrame:
    """The landing folder `options["path"]` as a stream of lines (the rows above), planned by a
    `LandingPlanner` over `options` (`path`, `manifest`, and optionally `maxBytesPerTrigger`,
    `maxBytesPerPartition`, `minBytesPerPartition`, `maxFilesPerTrigger`, `maxLineBytes`) that
    plans nothing more once `stopping` is set."""
    from pyspark.java_gateway import ensure_callback_server_started

    from spark_jobs.transforms import MAX_LINE_BYTES

    max_line_bytes = _size_option(options, "maxLineBytes", MAX_LINE_BYTES)   # positive
    if max_line_bytes > 1 << 30:   # a JVM byte array holds what is kept of a line
        raise ValueError("the landing source's maxLineBytes must be at most 1g")
    planner = LandingPlanner(options, stopping)
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    ensure_callback_server_started(gateway)
    planner_id = gateway.jvm.weir.LandingSource.register(planner)
    return (spark.readStream.format(JVM_SOURCE).option("planner", planner_id)
            .option("maxLineBytes", str(max_line_bytes)).load())
