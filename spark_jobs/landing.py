"""`weir_landing`: a bounded, splittable streaming reader of JSON-lines landing files (PySpark 4.2).

A Python Data Source (``pyspark.sql.datasource.DataSource``) whose stream reader reads the text
files of one landing folder, line by line, in micro-batches of bounded size:

* **Offsets** are a position in an append-only *manifest* of discovered files:
  ``{"manifest": id, "file": i, "byte": b}`` — every manifest entry before ``i`` is fully read,
  entry ``i`` up to byte ``b``. The manifest (path, size, mtime_ns, blake2b digest per entry)
  lives in the folder given by ``option("manifest", dir)`` and is persisted (temp file +
  no-clobber link, fsync) *before* ``latestOffset`` returns an offset that refers to its new
  entries, so a restarted query (a new reader on the same checkpoint) sees the very same file
  order. The random manifest ``id`` in every offset ties the checkpoint to its manifest.
* **Discovery** lists the folder (names starting with ``.`` or ``_`` are ignored: writers write
  there and rename when complete). A path that is not in the manifest, or whose ``(size,
  mtime_ns)`` differs from its latest entry, becomes a new entry — a re-dropped file is new
  content. New files are ordered by ``(mtime_ns, name)``. The modification time never decides
  *whether* a file is read (no max-age cut-off), only the order.
* **Admission control**: ``getDefaultReadLimit()`` is ``ReadMaxBytes(maxBytesPerTrigger)``; one
  file larger than the bound is split over several micro-batches. ``Trigger.AvailableNow`` is
  supported (``SupportsTriggerAvailableNow``): the target is fixed by
  ``prepareForTriggerAvailableNow()`` and reached in bounded batches.
* **Partitions** are byte ranges of at most ``maxBytesPerPartition`` (consecutive small files are
  packed into one partition), so several tasks read in parallel.
* **Lines** follow Hadoop's ``LineRecordReader`` convention, so a line's identity does not depend
  on where batch or partition boundaries fall: the range ``[a, b)`` owns exactly the lines whose
  first byte lies in ``[a, b)``; it skips the partial line it starts in and reads past ``b`` to
  finish its last line.

Output schema (``LandingDataSource.schema()``)::

    source   string  not null  file URI + '#' + first 12 hex chars of the file's blake2b digest
    position bigint  not null  byte offset of the line's first byte in the file (the first line
                               is at 0 even when a UTF-8 BOM precedes its text)
    value    string            the line: no '\\n', no trailing '\\r', no BOM; bytes that are not
                               valid UTF-8 are decoded with U+FFFD replacement characters
    raw      binary            the line's bytes (same slice as value) only when they are not
                               valid UTF-8, else null

``(source, position)`` is unique and stable: the same content at the same path always yields the
same identities (the digest is of the content), so a replayed batch can be deduplicated by it.

Options (case-insensitive): ``path`` (the landing folder, or ``load(path)``), ``manifest``
(required), ``maxBytesPerTrigger`` (default 128 MiB, as `catalog.FileSource`),
``maxBytesPerPartition`` (16 MiB), ``maxFilesPerTrigger`` (none), ``maxRowsPerBatch`` (Arrow
batch rows sent to the JVM, 32768).

A checkpoint reset seeds a fresh manifest (`seed`): the files to skip as entries, and a
``start.json`` naming the first entry to read, which ``initialOffset`` starts from.

The module must be importable by the Python workers (a package installed in the venv, or
``spark.submit.pyFiles``): partitions and the reader are pickled by reference to it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from spark_jobs.landing_manifest import (
    FileEntry,
    LandingError,
    Manifest,
    Position,
    advance,
    discover,
)

NAME = "weir_landing"
DEFAULT_MAX_BYTES_PER_TRIGGER = 128 << 20
DEFAULT_MAX_BYTES_PER_PARTITION = 16 << 20
DEFAULT_MAX_ROWS_PER_BATCH = 32768
_BOM = b"\xef\xbb\xbf"

SCHEMA = StructType([
    StructField("source", StringType(), False),
    StructField("position", LongType(), False),
    StructField("value", StringType(), True),
    StructField("raw", BinaryType(), True),
])


@dataclass(frozen=True)
class FileRange:
    """Bytes `[start, end)` of one manifest entry; owns the lines that begin inside."""

    entry: FileEntry
    start: int
    end: int


@dataclass(frozen=True)
class LandingPartition(InputPartition):
    """One task's work: consecutive file ranges, together at most `maxBytesPerPartition`."""

    ranges: tuple[FileRange, ...]

    def __post_init__(self) -> None:
        # InputPartition.__init__ sets `value`; keep repr/pickle small and explicit.
        object.__setattr__(self, "value", None)


def plan_partitions(entries: Sequence[FileEntry], start: Position, end: Position,
                    max_partition_bytes: int) -> list[LandingPartition]:
    ranges: list[FileRange] = []
    for i in range(start.file, min(end.file + 1, len(entries))):
        entry = entries[i]
        a = start.byte if i == start.file else 0
        b = end.byte if i == end.file else entry.size
        while a < b:  # empty files and empty ranges own no line
            step = min(b, a + max_partition_bytes)
            ranges.append(FileRange(entry, a, step))
            a = step
    parts: list[LandingPartition] = []
    group: list[FileRange] = []
    size = 0
    for r in ranges:
        if group and size + (r.end - r.start) > max_partition_bytes:
            parts.append(LandingPartition(tuple(group)))
            group, size = [], 0
        group.append(r)
        size += r.end - r.start
    if group:
        parts.append(LandingPartition(tuple(group)))
    return parts


# --------------------------------------------------------------------------------------------
# Reading one range (executor side)
# --------------------------------------------------------------------------------------------

def _check_unchanged(entry: FileEntry) -> None:
    try:
        st = os.stat(entry.path)
    except FileNotFoundError as e:
        raise LandingError(f"{entry.path} vanished before it was read (manifest entry {entry})") from e
    if (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns):
        raise LandingError(
            f"{entry.path} changed after discovery: size/mtime_ns {st.st_size}/{st.st_mtime_ns}, "
            f"manifest {entry.size}/{entry.mtime_ns}; its content can no longer be read as discovered"
        )


@dataclass
class _Lines:
    """The lines a range owns, as Arrow-ready buffers (no Python object per line)."""

    positions: Any  # np.ndarray[int64], absolute byte offsets
    offsets: Any  # np.ndarray[int32], n + 1 offsets into data
    data: Any  # np.ndarray[uint8], the concatenated line contents


def _read_owned(r: FileRange) -> _Lines | None:
    """Read the bytes of the lines owned by `r` (LineRecordReader convention) and cut them."""

    entry, a, b = r.entry, r.start, r.end
    base = max(a - 1, 0)
    with open(entry.path, "rb", buffering=0) as f:
        f.seek(base)
        buf = bytearray(f.read(b - base))
        if len(buf) != b - base:
            raise LandingError(f"{entry.path} is shorter than its manifest entry ({entry.size})")
        # first owned line start
        if a == 0:
            first = 0
        elif buf[0] == 0x0A:  # byte a-1 ends a line: a line starts at a
            first = a
        else:
            nl = buf.find(b"\n", 1)
            if nl < 0:
                return None
            first = base + nl + 1
        if first >= b:
            return None
        # last owned line start: after the last '\n' in [first, b - 1), else `first`
        last_nl = buf.rfind(b"\n", first - base, b - 1 - base)
        last_start = base + last_nl + 1 if last_nl >= 0 else first
        # finish the last owned line: read on until its '\n' or the end of the file
        scan = last_start - base
        step = 1 << 16
        while buf.find(b"\n", scan) < 0 and base + len(buf) < entry.size:
            scan = len(buf)
            more = f.read(min(step, entry.size - base - len(buf)))
            if not more:
                break
            buf += more
            step = min(step * 2, 16 << 20)
        stop_nl = buf.find(b"\n", last_start - base)
        region_end = (stop_nl + 1) if stop_nl >= 0 else len(buf)

    arr = np.frombuffer(buf, dtype=np.uint8, offset=first - base, count=region_end - (first - base))
    nls = np.flatnonzero(arr == 0x0A)
    size = arr.size
    ends_with_nl = size > 0 and arr[-1] == 0x0A
    if ends_with_nl:
        starts = np.concatenate(([0], nls[:-1] + 1)).astype(np.int64)
        ends = nls.astype(np.int64)
    else:
        starts = np.concatenate(([0], nls + 1)).astype(np.int64)
        ends = np.concatenate((nls, [size])).astype(np.int64)
    content_starts = starts.copy()
    bom = first == 0 and size >= 3 and ends[0] >= 3 and bytes(arr[:3]) == _BOM
    if bom:
        content_starts[0] = 3
    prev = arr[np.maximum(ends - 1, 0)]
    cr = (ends > content_starts) & (prev == 0x0D)
    content_ends = ends - cr
    keep = np.ones(size, dtype=bool)
    keep[nls] = False
    keep[content_ends[cr]] = False
    if bom:
        keep[:3] = False
    data = arr[keep]
    lengths = content_ends - content_starts
    offsets = np.zeros(lengths.size + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if int(offsets[-1]) != data.size:  # invariant of the cut above
        raise AssertionError(f"line cut mismatch in {entry.path} [{a}, {b})")
    return _Lines(positions=starts + first, offsets=offsets, data=data)


def read_range_batches(r: FileRange, arrow_schema: Any, max_rows: int) -> Iterator[Any]:
    """The lines `r` owns as `pyarrow.RecordBatch`es of `arrow_schema` (source, position, value,
    raw), at most `max_rows` rows each. Valid UTF-8 is passed through without a Python object per
    line; a batch with invalid bytes falls back to per-line decoding with replacement."""

    _check_unchanged(r.entry)
    lines = _read_owned(r)
    if lines is None:
        _check_unchanged(r.entry)
        return
    n = lines.positions.size
    value_bin = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(lines.offsets), pa.py_buffer(lines.data)])
    value_all = value_bin.view(pa.string())
    positions = pa.array(lines.positions, type=pa.int64())
    source = pa.scalar(r.entry.source, pa.string())
    for i in range(0, n, max_rows):
        m = min(max_rows, n - i)
        value = value_all.slice(i, m)
        raw: Any = pa.nulls(m, pa.binary())
        try:
            value.validate(full=True)
        except pa.ArrowInvalid:
            value, raw = _decode_with_replacement(value_bin.slice(i, m))
        yield pa.RecordBatch.from_arrays(
            [pa.repeat(source, m), positions.slice(i, m), value, raw], schema=arrow_schema)
    _check_unchanged(r.entry)  # changed while read: fail rather than emit a mix


def _decode_with_replacement(values: Any) -> tuple[Any, Any]:
    texts: list[str] = []
    raws: list[bytes | None] = []
    for b in values.to_pylist():
        try:
            texts.append(b.decode("utf-8"))
            raws.append(None)
        except UnicodeDecodeError:
            texts.append(b.decode("utf-8", errors="replace"))
            raws.append(b)
    return pa.array(texts, pa.string()), pa.array(raws, pa.binary())


# --------------------------------------------------------------------------------------------
# The data source
# --------------------------------------------------------------------------------------------

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


class LandingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, admission control and planning run in one long-lived Python process next to the
    driver (Spark's ``python_streaming_source_runner``); ``read()`` runs in executor Python
    workers on an unpickled copy. So ``__init__`` stays cheap and I/O-free: it also runs in the
    read planner and must pickle small; the manifest is loaded on first driver-side use."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        path = options.get("path")
        manifest = options.get("manifest")
        if not path or not manifest:
            raise ValueError(f"{NAME}: options 'path' and 'manifest' are required")
        self.landing = Path(path).absolute()
        self.manifest_dir = Path(manifest).absolute()
        self.max_bytes_per_trigger = _size_option(
            options, "maxBytesPerTrigger", DEFAULT_MAX_BYTES_PER_TRIGGER)
        self.max_bytes_per_partition = _size_option(
            options, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION)
        if self.max_bytes_per_partition > 1 << 30:  # Arrow string offsets are int32
            raise ValueError(f"{NAME}: maxBytesPerPartition must be at most 1g")
        self.max_rows_per_batch = int(options.get("maxRowsPerBatch", DEFAULT_MAX_ROWS_PER_BATCH))
        files = options.get("maxFilesPerTrigger")
        self.max_files_per_trigger = int(files) if files else None
        self.schema = schema
        self._manifest: Manifest | None = None
        self._target: Position | None = None  # set by prepareForTriggerAvailableNow

    # pickling: never ship the loaded manifest to the workers
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_manifest"] = None
        return state

    # --- driver side (the source runner process) ---------------------------------------------

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

    def _offset(self, pos: Position) -> dict[str, Any]:
        return pos.to_offset(self.manifest.id)

    def initialOffset(self) -> dict[str, Any]:
        return self._offset(Position(self.manifest.start, 0))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        discover(self.manifest)
        self._target = Position(len(self.manifest), 0)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._checked(start)
        if self._target is None:
            discover(self.manifest)  # persisted before the offset below can refer to it
        stop = self._target or Position(len(self.manifest), 0)
        if self.max_files_per_trigger:
            stop = min(stop, Position(begin.file + self.max_files_per_trigger, 0))
        if isinstance(limit, ReadAllAvailable):
            max_bytes = None
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        else:
            raise LandingError(f"{NAME} does not support read limit {limit!r}")
        return self._offset(advance(self.manifest.entries, begin, stop, max_bytes))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._manifest is None:
            return None
        return self._offset(self._target or Position(len(self.manifest), 0))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._checked(start), self._checked(end)
        return plan_partitions(self.manifest.entries, begin, stop, self.max_bytes_per_partition)

    # --- executor side -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LandingPartition), type(partition)

        # Exactly the Arrow schema the worker checks batches against (nullability included).
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for r in partition.ranges:
            yield from read_range_batches(r, arrow_schema, self.max_rows_per_batch)


class LandingDataSource(DataSource):
    """``spark.dataSource.register(LandingDataSource)``, then
    ``spark.readStream.format("weir_landing").option("manifest", dir).load(folder)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> LandingStreamReader:
        return LandingStreamReader(self.options, schema)
