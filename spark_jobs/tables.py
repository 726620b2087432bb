"""Delta writers, one per kind of table write. Every write is idempotent by record identity, so a
replayed micro-batch (after a crash, or after a checkpoint restore) changes nothing:

- `insert_absent`: insert the rows whose key is not in the table yet, reading its keys and
  appending in one transaction whose conflict detection keeps it exact beside concurrent writers
  (bronze, quarantine and silver: a back-fill rewrites the last two while the stream runs);
- `upsert`: set the row of each key (gold windows, whose values are complete aggregates);
- `reconcile`: make a range of a table equal re-derived rows by one MERGE of the differences,
  deleting only rows the caller owns (back-fill: never what the stream committed meanwhile).

A leased driver's writes carry its fencing token into each Delta commit (`Fencing`), so a driver
that lost its lease cannot commit even if it was paused between its lease check and its commit.

Concurrent commits (stream + back-fill + compaction) are retried within a bound, never lost.
"""

from __future__ import annotations

import datetime
import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from spark_jobs.session import session_conf

if TYPE_CHECKING:
    import deltalake
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ATTEMPTS = 8


@dataclass
class Fencing:
    """A lease holder's fencing token, carried into every Delta commit it makes.

    Each commit sets Delta's application transaction `weir.lease.<pipeline>` to a version that
    grows with the token (token × 2^32 + a count of this holder's writes). Delta makes a
    transaction that checked that id conflict with any concurrent commit that set it, and skips
    a write whose version is not above the table's. So once a newer holder has committed to a
    table, an older holder's commit in flight fails (and its retry, like any later write of it,
    commits nothing): a driver paused between its lease check and its commit cannot write.

    A second process of the holder's (`spark_jobs.derived`, sharing its lease) counts its writes
    from `SHARED_FIRST_WRITE`, above any count of the holder's own (whose claims land on the tables
    that process writes): its first write is then above the table's, and not skipped."""

    SHARED_FIRST_WRITE: ClassVar[int] = 1 << 31

    pipeline: str
    token: int
    first_write: int = 1
    _writes: Iterator[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._writes = itertools.count(self.first_write)

    def shared(self) -> Fencing:
        """The same token, for a second process of the holder's."""
        return Fencing(self.pipeline, self.token, self.SHARED_FIRST_WRITE)

    @property
    def app_id(self) -> str:
        return f"weir.lease.{self.pipeline}"

    def next_version(self) -> int:
        return (self.token << 32) | next(self._writes)

    def save(self, writer: DataFrameWriter, path: Path) -> None:
        """A DataFrame write carrying the token (Delta's `txnAppId`/`txnVersion` options)."""
        version = self.next_version()
        writer.option("txnAppId", self.app_id).option("txnVersion", version).save(str(path))
        self.landed(path, version)

    def dml(self, spark: SparkSession, path: Path, statement: Callable[[], None]) -> None:
        """DML (MERGE) on `path` carrying the token: Delta reads it from the session's conf, so
        the session must run no other Delta DML meanwhile (each streaming query has its own)."""
        version = self.next_version()
        spark.conf.set("spark.databricks.delta.write.txnAppId", self.app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
        try:
            statement()
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")
        self.landed(path, version)

    def claim(self, paths: Iterable[Path]) -> None:
        """An empty commit carrying the token to each existing table, made by a new holder right
        after it takes the lease and before it reads anything: an older holder's commit still in
        flight then either landed before (and everything this holder reads includes it) or
        conflicts and fails, instead of landing later between this holder's own commits."""
        for path in paths:
            if delta_version(path) is not None:
                commit_nothing(path, self)

    def landed(self, path: Path, version: int) -> None:
        """Raise `FencedWriteError` unless the table's last commit under the token is `version`:
        Delta skips a write whose version is not above the table's without a word, and a skip
        means a newer holder has committed (or a bug): never a silent loss."""
        found = delta_log(path, files=True).transaction_version(self.app_id)
        if found != version:
            raise FencedWriteError(
                f"{self.pipeline}: a write to {path} did not land (fencing version {version}, "
                f"the table carries {found}): a newer lease holder has committed; this driver stops")

    @classmethod
    def used_tokens(cls, pipeline: str, paths: Iterable[Path]) -> int:
        """The highest token any commit to these tables carried (0: none). Read from the Delta
        logs without a JVM."""
        app_id = cls(pipeline, 0).app_id
        versions = [delta_log(path, files=True).transaction_version(app_id) or 0
                    for path in paths if delta_version(path) is not None]
        return max(versions, default=0) >> 32


def delta_version(table: Path) -> int | None:
    """The latest committed version of the Delta table at `table`, from its `_delta_log` (no JVM);
    None while it has no commit. A writer creates `_delta_log` before its first commit lands (by
    rename, atomically), so "the folder exists" is not "the table exists": a read in between fails
    with DELTA_TABLE_NOT_FOUND. Every check for a table's existence asks this."""
    log_dir = Path(table) / "_delta_log"
    if not log_dir.is_dir():
        return None
    versions = [int(p.name[:-5]) for p in log_dir.iterdir()
                if p.name.endswith(".json") and p.name[:-5].isdigit()]
    return max(versions) if versions else None


def delta_log(table: Path, *, files: bool = False) -> deltalake.DeltaTable:
    """The Delta table at `table` as delta-rs reads its log, without the JVM: for the questions a
    driver asks at every start (a version, a marker, a claim's token), in milliseconds where Spark
    takes a second. With `files`, its data files are listed too."""
    from deltalake import DeltaTable

    return DeltaTable(str(table), without_files=not files)


def holds_data(table: Path) -> bool:
    """Whether the latest version of the Delta table at `table` has any data file."""
    return bool(delta_log(table, files=True).file_uris())


class FencedWriteError(RuntimeError):
    """A fenced write did not land: this process no longer holds the pipeline's lease."""


def save_fenced(writer: DataFrameWriter, path: Path, fencing: Fencing | None) -> None:
    """`writer.save(path)`, carrying the token of a leased driver (None: not a driver)."""
    if fencing is None:
        writer.save(str(path))
    else:
        fencing.save(writer, path)


NO_ROWS_METRICS = {"numFiles": "0", "numOutputRows": "0", "numOutputBytes": "0"}


def commit_nothing(path: Path, fencing: Fencing | None) -> None:
    """A new version of the table at `path` that changes no data (a lease claim, a version for a
    query to start at), carrying the holder's token. Committed with delta-rs, without the JVM: a
    driver claims every table at each start, and through Spark a cold driver's five claims took
    about 8 s of a 21 s restart (docs/performance.md); with delta-rs a few milliseconds each.

    Fenced like a Spark write: a token in the table above this holder's refuses the commit
    (`FencedWriteError`), and delta-rs fails a commit when another commit carrying the same
    application id lands after the version it read; it is then tried again on the newer version,
    where the token decides. An older holder's Spark commit in flight read the application id, so
    Delta fails it once this commit lands first (`tests/control/test_fencing.py`)."""
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction
    from deltalake import DeltaTable as LogWriter

    def commit() -> int:
        table = LogWriter(str(path))
        transactions, version = None, None
        if fencing is not None:
            version = fencing.next_version()
            held = table.transaction_version(fencing.app_id)
            if held is not None and held >= version:
                raise FencedWriteError(
                    f"{fencing.pipeline}: {path} carries fencing version {held}, above this holder's "
                    f"{version}: a newer lease holder has committed; this driver stops")
            transactions = [Transaction(fencing.app_id, version, int(time.time() * 1000))]
        table.create_write_transaction(
            [], mode="append", schema=table.schema(),
            partition_by=table.metadata().partition_columns or None,
            # the metrics Spark records for an append of no rows: readers of the history (the
            # asset watcher, `weir_airflow.delta_watch`) tell a commit that changed no data by them
            commit_properties=CommitProperties(
                app_transactions=transactions, custom_metadata={"operationMetrics": NO_ROWS_METRICS}),
            # checkpoints and log clean-up stay the JVM writers' (the table's own settings)
            post_commithook_properties=PostCommitHookProperties(
                create_checkpoint=False, cleanup_expired_logs=False))
        if fencing is not None and version is not None:
            fencing.landed(path, version)
        return delta_version(path)   # this commit's, unless another has landed since

    committed = retry_conflicts(commit, what=f"empty commit to {path}")
    if committed is not None:
        carry_checksum(path, committed)


# Delta keeps a table's application transactions in a version's checksum up to this many
# (`spark.databricks.delta.setTransactionsInCrc.maxAllowed`'s default).
MOST_TRANSACTIONS_IN_CHECKSUM = 100


def carry_checksum(path: Path, version: int) -> bool:
    """Write the checksum (`.crc`) of `version` of the table at `path`, a commit of nothing but
    application transactions (`commit_nothing`'s), from the checksum of the version before: the
    same files, sizes, schema and histograms, its transactions set. Whether it was written.

    delta-rs writes no checksum. Without one, Spark's next write to the table rebuilt the whole
    state twice: once to read the fencing version (Delta's `txnVersion`), once to write its own
    checksum, which Delta derives from the one before when there is one. A driver claims every
    table at each start, so every start paid both on each table before its first batch. Nothing is
    written unless the version before has a checksum holding its transactions (Delta keeps them
    there only without a retention set and up to its threshold), the commit holds nothing else,
    and no checksum is there yet; it is linked into place, so never over another writer's."""
    folder = Path(path) / "_delta_log"
    before, after = folder / f"{version - 1:020d}.crc", folder / f"{version:020d}.crc"
    if version < 1 or after.exists() or not before.exists():
        return False
    actions = [json.loads(line) for line in (folder / f"{version:020d}.json").read_text().splitlines()
               if line.strip()]
    checksum = json.loads(before.read_text())
    transactions = checksum.get("setTransactions")
    if (any(set(action) - {"commitInfo", "txn"} for action in actions)
            or not isinstance(transactions, list) or checksum.get("inCommitTimestampOpt") is not None):
        return False
    by_app = {t["appId"]: t for t in transactions}
    by_app.update((a["txn"]["appId"], a["txn"]) for a in actions if "txn" in a)
    if len(by_app) > MOST_TRANSACTIONS_IN_CHECKSUM:
        return False
    checksum["setTransactions"] = list(by_app.values())
    committed = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    if committed.get("txnId"):
        checksum["txnId"] = committed["txnId"]
    else:
        checksum.pop("txnId", None)
    written = folder / f".{version:020d}.crc.{os.getpid()}.tmp"
    written.write_text(json.dumps(checksum))
    try:
        os.link(written, after)
    except FileExistsError:
        return False
    finally:
        written.unlink()
    return True


def _dml(spark: SparkSession, path: Path, statement: Callable[[], None],
         fencing: Fencing | None) -> None:
    if fencing is None:
        statement()
    else:
        fencing.dml(spark, path, statement)


CONFLICT_CLASSES = ("[DELTA_CONCURRENT_", "[DELTA_METADATA_CHANGED]", "[DELTA_PROTOCOL_CHANGED]")


def is_conflict(err: BaseException) -> bool:
    """A Delta optimistic-concurrency conflict: converted to Delta's Python class, or (when it
    reaches Python wrapped or unconverted) recognised by its error class; or delta-rs's failed
    commit (`commit_nothing`)."""
    from delta.exceptions import DeltaConcurrentModificationException
    from deltalake.exceptions import CommitFailedError

    return isinstance(err, DeltaConcurrentModificationException | CommitFailedError) or any(
        marker in str(err) for marker in CONFLICT_CLASSES)


def retry_conflicts(action: Callable[[], T], *, what: str, attempts: int = MAX_ATTEMPTS) -> T:
    """Run `action`, retrying Delta's concurrent-modification conflicts with backoff."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as err:
            if not is_conflict(err) or attempt == attempts:
                raise
            delay = min(0.2 * 2 ** attempt, 5.0)
            log.warning("%s: concurrent commit (%s), retry %d/%d in %.1fs",
                        what, type(err).__name__, attempt, attempts - 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


# Delta writes a table's checkpoint inside the commit whose version is a multiple of the table's
# `delta.checkpointInterval`: that commit returns once Spark jobs have rebuilt the table's whole
# state and written it out, and a micro-batch landing on it waits (every tenth batch, 2-3 s on top
# of a 1.7 s batch on this machine: the stream's tail latency, docs/performance.md). Weir's tables
# set the interval out of reach, and their writers write the checkpoint after their commits, as
# often, with delta-rs (`checkpoint_after_commits`).
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
INTERVAL_OUT_OF_REACH = str(2**31 - 1)
CHECKPOINT_EVERY = 10
# The properties of every table Weir writes (`ensure_table`, `set_properties`).
WEIR_PROPERTIES = {CHECKPOINT_INTERVAL: INTERVAL_OUT_OF_REACH}
# The columns whose per-file minimum, maximum and null count Delta keeps (by default the first 32
# of a table: every column of Weir's). See `layers.statistics_columns`.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def ensure_table(spark: SparkSession, path: Path, schema: StructType,
                 partition_by: Iterable[str] = (), properties: Mapping[str, str] | None = None) -> None:
    """Create the Delta table at `path` with `schema` unless it exists, with Weir's own properties
    (`WEIR_PROPERTIES`: its checkpoints written after commits) and `properties`."""
    from delta.tables import DeltaTable

    if delta_version(path) is not None:
        return
    builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema)
    for key, value in {**WEIR_PROPERTIES, **(properties or {})}.items():
        builder = builder.property(key, value)
    partitions = list(partition_by)
    if partitions:
        builder = builder.partitionedBy(*partitions)
    retry_conflicts(builder.execute, what=f"create {path}")


def sql_literal(value: object) -> str:
    """A Python value as a Spark SQL literal (strings, dates, integers)."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"no SQL literal for {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.date):
        return f"DATE'{value.isoformat()}'"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def in_list(column: str, values: Iterable[object]) -> str:
    """`t.column IN (...)` as SQL, for partition pruning of the MERGE target."""
    vals = sorted(set(values), key=str)
    if not vals:
        return "false"
    return f"t.`{column}` IN ({', '.join(sql_literal(v) for v in vals)})"


def key_ranges(group: str, ordered: str, ranges: Mapping[object, tuple[int, int]]) -> str:
    """Where a key (`group`, `ordered`) of a batch can already be in the target `t`, as SQL:
    `t.group IN (…) AND ((t.group = g AND t.ordered BETWEEN first AND last) OR …)`, with each
    group's first and last value in the batch. Delta skips every file whose statistics fall
    outside (a file of other sources, or of other offsets of the same Kafka partition), so a
    batch's dedupe reads what its keys could collide with, not the table's whole history. The
    `IN` comes first: a row of another group never evaluates the ranges."""
    if not ranges:
        return "false"
    within = " OR ".join(
        f"(t.`{group}` = {sql_literal(g)} AND t.`{ordered}` BETWEEN {int(first)} AND {int(last)})"
        for g, (first, last) in sorted(ranges.items(), key=lambda r: str(r[0])))
    return f"{in_list(group, ranges)} AND ({within})"


@dataclass(frozen=True)
class Inserted:
    """What `insert_absent` did: the rows it inserted, the table's files whose keys it read to
    know, the files whose key hashes it compared with the batch's to choose them (0: no hash
    column), and how many of those it read the hashes of (the others' the driver kept)."""

    rows: int
    files_read: int
    files_hashed: int = 0
    hashes_read: int = 0


def insert_absent(df: DataFrame, path: Path, key: Sequence[str], *, keys: DataFrame | None = None,
                  key_hash: str | None = None, prune: str | None = None,
                  fencing: Fencing | None = None) -> Inserted:
    """Insert the rows of `df` (unique by `key`) whose key the table at `path` does not hold yet.

    One Delta transaction reads the key columns of the table and commits the new rows
    (`infra/jvm/weir/InsertAbsent.java`): exact beside concurrent writers like a MERGE (a
    concurrent change to what it read conflicts, and is retried here), but the insert shuffles
    nothing: the batch's keys are broadcast against the table's, and the few found back against
    the batch. `df`'s size is bounded by the caller (one micro-batch).

    `keys` holds the keys to look up (default: `df`'s); any superset will do, such as the keys
    before a dedupe, which then runs once. `key_hash` is the key's hash as SQL
    (`transforms.key_hash_expression`; silver's `_key_hash` is generated as it): the batch's hashes
    are compared with every file's first, and the keys read only of the files holding one. A
    file's hashes come from the column Delta generates as `key_hash` where the table has one,
    else are computed from its key. Each file's hashes are read once and kept in the driver
    (`infra/jvm/weir/KeyHashes.java`, at most `spark.weir.keyHashCache.maxBytes`, an eighth of the
    heap by default): a batch reads the hashes of the files written since the batch before, not of
    the whole table. `prune` (SQL on the target `t`, as `key_ranges` gives) bounds where a key can
    stand, and only the files Delta's statistics leave are read; without it every partition is (a
    key may stand under any)."""
    spark = df.sparkSession
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    names = java_strings(gateway, key)

    def insert() -> Inserted:
        version = fencing.next_version() if fencing is not None else -1
        rows, read, hashes_read, hashed = gateway.jvm.weir.InsertAbsent.insert(
            spark._jsparkSession, str(path), df._jdf,  # type: ignore[attr-defined]
            None if keys is None else keys._jdf, names, key_hash, prune,
            fencing.app_id if fencing is not None else None, version)
        if fencing is not None and rows < 0:
            # skipped: the table carries a newer holder's version, which `landed` names (an insert
            # that committed carries this one: nothing to read back)
            fencing.landed(path, version)
        return Inserted(rows=int(rows), files_read=int(read), files_hashed=int(hashed),
                        hashes_read=int(hashes_read))

    return retry_conflicts(insert, what=f"insert into {path}")


def warm_key_hashes(spark: SparkSession, path: Path, key_hash: str) -> int:
    """Read into the driver's key-hash cache the hashes (`key_hash`, as `insert_absent` takes it)
    of the files of the table at `path` that it does not hold yet; returns how many files were
    read. An `insert_absent` with the same `key_hash` then finds them there: a micro-batch warms
    the cache while it parses, so that its insert does not read the hashes of the files the batch
    before wrote after the parse (`infra/jvm/weir/InsertAbsent.java`, `warm`). Only ever a head
    start: the insert reads whatever this did not."""
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    return int(gateway.jvm.weir.InsertAbsent.warm(spark._jsparkSession,  # type: ignore[attr-defined]
                                                   str(path), key_hash))


def java_strings(gateway: Any, values: Sequence[str | None]) -> Any:
    """`values` as a Java String[] (py4j)."""
    array = gateway.new_array(gateway.jvm.java.lang.String, len(values))
    for i, value in enumerate(values):
        array[i] = value
    return array


def partitions_holding(df: DataFrame, path: Path, key: Sequence[str], partition: str, *,
                       key_hash: str | None = None) -> list[object]:
    """The values of `partition` under which the table at `path` holds a key of `df`: where an
    event already stands when its new copy would fall under another partition (an event resent
    with another event time). See `holding`."""
    return [row[0] for row in holding(df, path, key, partition, key_hash=key_hash).collect()]


def holding(df: DataFrame, path: Path, key: Sequence[str], partition: str, *,
            key_hash: str | None = None) -> DataFrame:
    """`partitions_holding` as a plan (`infra/jvm/weir/InsertAbsent.java`, `held`). It reads only
    the key and partition columns and never shuffles them: `df`'s keys (one micro-batch's, bounded
    by the source's batch bound) are broadcast, whatever the session's broadcast threshold, and the
    table is scanned against them in place. A shuffled join moved every key of the table each
    batch: 0.58-0.95 s against 0.29-0.46 s on a silver of about 24 k rows, 4.1 s against 2.1-2.3 s
    on 5 M (docs/performance.md).

    With `key_hash` (`transforms.key_hash_expression` of `key`), only the files whose key hashes
    meet the batch's are read, each file's hashes kept in the driver once read, as `insert_absent`
    does: a batch reads the keys of the files written since the batch before, not of the whole
    table, whose size no longer sets its cost."""
    from pyspark.sql import DataFrame as Frame

    spark = df.sparkSession
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    names = java_strings(gateway, key)
    held = gateway.jvm.weir.InsertAbsent.held(
        spark._jsparkSession, str(path), df.select(*key).distinct()._jdf,  # type: ignore[attr-defined]
        names, key_hash)
    return Frame(held, spark).select(partition).distinct()


def upsert(df: DataFrame, path: Path, key: Iterable[str], *, prune: str | None = None,
           fencing: Fencing | None = None) -> None:
    """Set the row of every key of `df` (null-safe keys), inserting the new ones."""
    from delta.tables import DeltaTable

    condition = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in key] + ([prune] if prune else []))

    def merge() -> None:
        _dml(df.sparkSession, path, lambda: DeltaTable.forPath(df.sparkSession, str(path)).alias("t")
             .merge(df.alias("s"), condition)
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute(), fencing)

    retry_conflicts(merge, what=f"upsert into {path}")


def delta_identifier(path: Path) -> str:
    """The table at `path` as a SQL identifier (`delta.`path``)."""
    return "delta.`" + str(path).replace("`", "``") + "`"


def add_missing_columns(spark: SparkSession, path: Path, schema: StructType) -> None:
    """Add the nullable columns of `schema` that the table at `path` lacks (a table created by an
    older version of the code); existing rows read them as null. The table's columns are read from
    its log with delta-rs: a driver asks at every start, mostly to hear "none"."""
    present = {f.name for f in delta_log(path).schema().fields}
    missing = [f for f in schema.fields if f.name not in present]
    if not missing:
        return
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
    retry_conflicts(lambda: spark.sql(f"ALTER TABLE {delta_identifier(path)} ADD COLUMNS ({columns})"),
                    what=f"add columns to {path}")


def set_properties(spark: SparkSession, path: Path, properties: Mapping[str, str]) -> None:
    """Give the table at `path` those of Weir's own properties (`WEIR_PROPERTIES`) and of
    `properties` it has no value of: a table created by an older version of the code. A value the
    table holds stays (an operator's own choice). One metadata commit, only then; asked of the log
    with delta-rs, as a driver asks at every start."""
    held = delta_log(path).metadata().configuration
    wanted = {key: value for key, value in {**WEIR_PROPERTIES, **properties}.items() if key not in held}
    if not wanted:
        return
    listed = ", ".join(f"{sql_literal(key)} = {sql_literal(value)}" for key, value in wanted.items())
    retry_conflicts(lambda: spark.sql(
        f"ALTER TABLE {delta_identifier(path)} SET TBLPROPERTIES ({listed})"),
        what=f"set {', '.join(wanted)} of {path}")


def last_checkpoint(table: Path) -> int | None:
    """The version of the latest checkpoint of the Delta table at `table`: from
    `_delta_log/_last_checkpoint`, else (a log without it) from its checkpoint files; None when it
    has none."""
    log_dir = Path(table) / "_delta_log"
    try:
        return int(json.loads((log_dir / "_last_checkpoint").read_text())["version"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):   # none, or being replaced
        pass
    versions = [int(p.name.split(".", 1)[0]) for p in log_dir.glob("*.checkpoint*.parquet")
                if p.name.split(".", 1)[0].isdigit()]
    return max(versions, default=None)


def checkpoint_if_due(path: Path) -> int | None:
    """Write a checkpoint of the latest version of the table at `path` when it stands
    `CHECKPOINT_EVERY` or more versions past the last one (past version 0 without one); the
    version checkpointed, None when none was due. Asking costs a read of `_last_checkpoint` and
    one file's existence: no listing of the log.

    Written with delta-rs: tens of milliseconds in the calling process, where Delta's own
    checkpoint (the state rebuilt by Spark jobs, then written by another) took about 3 s on a
    busy driver, and as long again from the batch it ran beside (docs/performance.md). Its files
    are Delta's classic checkpoint (each file with its statistics as text, the tables'
    application transactions), which Spark reads as its own."""
    since = last_checkpoint(path) or 0
    if not (Path(path) / "_delta_log" / f"{since + CHECKPOINT_EVERY:020d}.json").is_file():
        return None
    table = delta_log(path, files=True)
    table.create_checkpoint()
    return int(table.version())


def checkpoint_after_commits(*paths: Path) -> None:
    """The checkpoint of each table at `paths` that a writer's commits made due
    (`checkpoint_if_due`). One that fails is logged, not raised: the commits stand, and the table
    stays readable from its log until the next one."""
    for path in paths:
        try:
            version = checkpoint_if_due(path)
        except Exception as err:
            log.warning("checkpoint of %s not written: %s", path, (str(err).splitlines() or [err])[0])
            continue
        if version is not None:
            log.info("checkpoint of %s written at version %d", path, version)


OP = "_weir_op"


def _drop_doubled_keys(new: DataFrame, path: Path, key: Sequence[str], scope: str) -> None:
    """Delete the rows in `scope` whose key stands there more than once (damage: an upsert cannot
    make two rows one) and that `new` holds, so the reconcile that follows inserts it once."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    spark = new.sparkSession
    doubled = (spark.read.format("delta").load(str(path)).where(scope).groupBy(*key).count()
               .where(F.col("count") > 1).drop("count")
               .join(new.select(*key), on=list(key), how="left_semi")).localCheckpoint()
    if doubled.isEmpty():
        return
    condition = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in key] + [f"({scope})"])
    log.warning("%s: %d key(s) stand more than once in %s; rewritten once", path, doubled.count(), scope)

    def merge() -> None:
        (DeltaTable.forPath(spark, str(path)).alias("t").merge(doubled.alias("s"), condition)
         .whenMatchedDelete().execute())

    retry_conflicts(merge, what=f"drop doubled keys {scope} in {path}")


def _differing(new: DataFrame, existing: DataFrame, key: Sequence[str],
               maps: Collection[str] = ()) -> DataFrame:
    """The rows of `new` that `existing` does not hold as they are. Both sides are compared by
    key and a 96-bit digest of the whole row (two hashes, each column's nullness included so that
    a value moving between two nullable columns changes it), so the shuffle carries keys and
    digests, not whole rows: 2.7 s against `exceptAll`'s 7.2 s on a day of silver (1 M rows).
    Keys are unique on both sides (the caller has dropped doubled ones). Spark hashes no map (nor
    compares one in a set operation): the columns `maps` are compared by their JSON."""
    from pyspark.sql import functions as F

    # as the table types them (a derived int column stands as a bigint there, and hashes apart)
    typed = [F.col(c).cast(existing.schema[c].dataType) for c in new.columns]
    typed = [F.to_json(t) if c in maps else t for t, c in zip(typed, new.columns, strict=True)]
    values = [*typed, *(F.isnull(c) for c in new.columns)]

    def digests(rows: DataFrame, side: str) -> DataFrame:
        # every column renamed: the sides (and `new` below) never share a column to confuse
        return rows.select(*(F.col(k).alias(f"{side}{i}") for i, k in enumerate(key)),
                           F.xxhash64(*values).alias(f"{side}a"), F.hash(*values).alias(f"{side}b"))

    n, e = digests(new, "_n"), digests(existing, "_e")
    names = [*(str(i) for i in range(len(key))), "a", "b"]
    changed = n.join(e, [n[f"_n{c}"].eqNullSafe(e[f"_e{c}"]) for c in names], "left_anti")
    return new.join(changed, [new[k].eqNullSafe(changed[f"_n{i}"]) for i, k in enumerate(key)],
                    "left_semi")


# A reconcile's MERGE reads a local checkpoint of its changes: Delta need not copy them again
# ("materialize source", 1.7 s for a day of silver), and its default of writing each partition
# value's rows from one task wrote a day's 966 k rows on one core for 6 s (docs/performance.md).
RECONCILE_MERGE_CONF = {"spark.databricks.delta.merge.materializeSource": "none",
                        "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false"}


def reconcile(new: DataFrame, path: Path, key: Sequence[str], *, scope: str, partition: str,
              owned: DataFrame | None = None, before_write: Callable[[], None] | None = None) -> bool:
    """Make the rows of the table at `path` matching `scope` (SQL on its columns) equal `new`, with
    one MERGE of the differences; returns whether it committed (nothing when they are equal).

    Rows of `new` that are missing or differ are set by (null-safe) `key`. A row in scope whose
    key `new` lacks is deleted only if it is `owned` (matches a row of `owned` on all of `owned`'s
    columns; every row in scope when `owned` is None) and only as it was read: rows another writer
    commits meanwhile are never touched. The MERGE reads its target inside its own transaction, so
    a concurrent commit to the same partitions is a conflict, and is retried. `before_write` runs
    once the differences are known, before the MERGE (a seam to force a race in tests)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    spark = new.sparkSession
    schema = spark.read.format("delta").load(str(path)).schema
    columns = schema.fieldNames()
    # compared as their JSON: Spark compares no map (`_differing`)
    maps = {f.name for f in schema.fields if isinstance(f.dataType, MapType)}
    # `new` is read three times below (doubled keys, deletions, differences): derive it once.
    new = new.select(*columns).persist()
    try:
        _drop_doubled_keys(new, path, key, scope)
        existing = spark.read.format("delta").load(str(path)).where(scope)
        same_key = " AND ".join(f"e.`{k}` <=> n.`{k}`" for k in key)
        # each row once: a key standing twice as the same row is then one source row of two matches
        gone = (existing.alias("e").join(new.select(*key).alias("n"), F.expr(same_key), "left_anti")
                .dropDuplicates([c for c in columns if c not in maps]))
        if owned is not None:
            gone = gone.join(owned, on=[gone[c].eqNullSafe(owned[c]) for c in owned.columns],
                             how="left_semi")
        changes = (_differing(new, existing, key, maps).withColumn(OP, F.lit("upsert"))
                   .unionByName(gone.withColumn(OP, F.lit("delete")))).localCheckpoint()
    finally:
        new.unpersist()
    if before_write is not None:
        before_write()
    partitions = [row[0] for row in changes.select(partition).distinct().collect()]
    if not partitions:
        return False
    condition = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in key] + [in_list(partition, partitions)])
    as_read = " AND ".join(f"to_json(t.`{c}`) <=> to_json(s.`{c}`)" if c in maps else f"t.`{c}` <=> s.`{c}`"
                           for c in columns)
    values = {c: f"s.`{c}`" for c in columns}

    def merge() -> None:
        (DeltaTable.forPath(spark, str(path)).alias("t")
         .merge(changes.alias("s"), condition)
         .whenMatchedUpdate(condition=f"s.{OP} = 'upsert'", set=values)
         .whenMatchedDelete(condition=f"s.{OP} = 'delete' AND {as_read}")
         .whenNotMatchedInsert(condition=f"s.{OP} = 'upsert'", values=values)
         .execute())

    with session_conf(spark, RECONCILE_MERGE_CONF):
        retry_conflicts(merge, what=f"reconcile {scope} in {path}")
    return True
