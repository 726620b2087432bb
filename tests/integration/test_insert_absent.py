"""`tables.insert_absent` — the stream's silver write — inserts exactly the rows whose key the
table holds under no partition, and stays exact when another writer (a back-fill) commits the same
key between its read of the table's keys and its commit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from deltalake import DeltaTable as LogReader

from spark_jobs.tables import Fencing, insert_absent, upsert, warm_key_hashes
from tests.helpers import table
from tests.support.pause import pausing_udf
from tests.support.polling import wait_for

SCHEMA = "k string, v string, day string"
LIVE_FILES_BYTES = "spark.weir.liveFiles.maxBytes"


def test_only_rows_whose_key_stands_nowhere_are_inserted(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    spark.createDataFrame([("k1", "old", "d1"), ("k2", "old", "d2")], SCHEMA).write.format(
        "delta").partitionBy("day").save(str(path))
    # k1 again under another partition (an event resent with another event time): not inserted;
    # the columns in another order than the table's, as a derived frame may have them
    batch = spark.createDataFrame([("k1", "d3", "new"), ("k3", "d3", "new"), ("k4", "d1", "new")],
                                  "k string, day string, v string")
    token = Fencing("p", 1)

    assert insert_absent(batch, path, ["k"], fencing=token).rows == 2
    assert sorted(tuple(r) for r in table(spark, path).collect()) == [
        ("k1", "old", "d1"), ("k2", "old", "d2"), ("k3", "new", "d3"), ("k4", "new", "d1")]
    # a replay inserts nothing, and still commits the holder's version (`Fencing.landed` checks it)
    before = LogReader(str(path)).version()
    assert insert_absent(batch, path, ["k"], fencing=token).rows == 0
    assert LogReader(str(path)).version() == before + 1
    assert table(spark, path).count() == 4


def test_a_key_committed_by_another_writer_meanwhile_is_not_inserted_twice(spark, tmp_path: Path) -> None:
    """The insert reads the table's keys, then (its source paused here) a back-fill commits one of
    the batch's keys. Its commit conflicts with the read and is retried on the new snapshot: the
    key stands once."""
    path = tmp_path / "t"
    spark.createDataFrame([("k0", "old", "d1")], SCHEMA).write.format("delta").partitionBy(
        "day").save(str(path))
    opened, release = tmp_path / "opened", tmp_path / "release"
    paused = pausing_udf(opened, release)

    batch = spark.createDataFrame([("k1", "stream", "d1"), ("k2", "stream", "d2")], SCHEMA)
    with ThreadPoolExecutor(1) as pool:
        # one task holds the pause: the other core commits the back-fill's key meanwhile
        in_flight = pool.submit(insert_absent, batch.coalesce(1).withColumn("k", paused("k")), path,
                                ["k"])
        wait_for("the insert to have read the table's keys", opened.exists, 120, poll_s=0.05)
        upsert(spark.createDataFrame([("k1", "backfill", "d1")], SCHEMA), path, ["k"])   # a MERGE
        release.touch()
        assert in_flight.result(300).rows == 1
    assert sorted(tuple(r) for r in table(spark, path).collect()) == [
        ("k0", "old", "d1"), ("k1", "backfill", "d1"), ("k2", "stream", "d2")]


def test_a_prune_reads_only_the_files_a_key_could_stand_in(spark, tmp_path: Path) -> None:
    """With `prune` (the stream's quarantine write: where a batch's (source, position) keys can
    already be), Delta's file statistics leave out every other file: a batch's cost does not grow
    with the table's history."""
    from spark_jobs.tables import key_ranges

    path = tmp_path / "q"
    for source in ("a", "b", "c"):   # one file per source, as one micro-batch's quarantine rows
        spark.createDataFrame([(source, p, "reason") for p in range(10)],
                              "source string, position bigint, reason string").coalesce(1).write.format(
            "delta").mode("append").save(str(path))
    batch = spark.createDataFrame([("b", 5, "again"), ("b", 10, "new"), ("d", 0, "new")],
                                  "source string, position bigint, reason string")
    prune = key_ranges("source", "position", {"b": (5, 10), "d": (0, 0)})

    inserted = insert_absent(batch, path, ["source", "position"], prune=prune)
    assert (inserted.rows, inserted.files_read) == (2, 1)
    assert insert_absent(batch, path, ["source", "position"]).files_read == 4   # no prune: all
    assert table(spark, path).count() == 32


def _hashed_table(spark, path: Path, expression: str, files: list[list[str]]) -> None:
    """A table like silver: key `k` and a key-hash column Delta generates as `expression`, one
    file per list of keys."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    from spark_jobs.transforms import GENERATION_EXPRESSION, KEY_HASH

    (DeltaTable.create(spark).location(str(path)).addColumn("k", "string").addColumn("v", "string")
     .addColumn(KEY_HASH, LongType(), generatedAlwaysAs=expression).execute())
    for keys in files:
        # written as silver's rows are: the hash computed by the writer, checked by Delta
        spark.createDataFrame([(k, "old") for k in keys], "k string, v string").coalesce(1).select(
            "*", F.expr(expression).alias(KEY_HASH, metadata={GENERATION_EXPRESSION: expression})
        ).write.format("delta").mode("append").save(str(path))


def test_with_a_key_hash_only_files_holding_a_batch_hash_have_their_keys_read(spark, tmp_path: Path) -> None:
    """Silver's dedupe: the hash column of every file is scanned, and the keys are compared in
    full only in the files where a hash of the batch stands (here the one holding k5)."""
    from spark_jobs.transforms import key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    _hashed_table(spark, path, expression, [[f"k{i}" for i in range(f, f + 5)] for f in (0, 5, 10)])
    batch = spark.createDataFrame([("k5", "new"), ("n1", "new"), ("n2", "new")], "k string, v string")

    inserted = insert_absent(batch, path, ["k"], key_hash=expression)
    assert (inserted.rows, inserted.files_read, inserted.files_hashed) == (2, 1, 3)
    rows = {r.k: r.v for r in table(spark, path).collect()}
    assert len(rows) == 17 and rows["k5"] == "old" and rows["n1"] == rows["n2"] == "new"
    # the rows written carry the hash Delta generates: the next batch finds n1 by it
    again = insert_absent(spark.createDataFrame([("n1", "x"), ("n3", "x")], "k string, v string"),
                          path, ["k"], key_hash=expression)
    assert (again.rows, again.files_read, again.files_hashed) == (1, 1, 4)
    # a batch of new keys reads no file's keys
    assert insert_absent(spark.createDataFrame([("n9", "x")], "k string, v string"), path, ["k"],
                         key_hash=expression).files_read == 0
    assert table(spark, path).count() == table(spark, path).select("k").distinct().count() == 19


def test_keys_that_share_a_hash_are_told_apart_by_the_keys_themselves(spark, tmp_path: Path) -> None:
    """A hash two keys share costs a file read, never a row: with a hash of two values, most of
    the batch's hashes stand in every file, and every key is then compared in full."""
    path, expression = tmp_path / "t", "pmod(xxhash64(`k`), 2)"
    _hashed_table(spark, path, expression, [["a", "b", "c"], ["d", "e", "f"]])
    batch = spark.createDataFrame([(k, "new") for k in ("a", "f", "x", "y", "z")], "k string, v string")

    inserted = insert_absent(batch, path, ["k"], key_hash=expression)
    assert (inserted.rows, inserted.files_read, inserted.files_hashed) == (3, 2, 2)
    assert sorted(r.k for r in table(spark, path).where("v = 'new'").collect()) == ["x", "y", "z"]


def test_a_table_without_the_hash_column_has_its_files_hashes_computed_from_the_key(
        spark, tmp_path: Path) -> None:
    """A silver created before the hash column: the key hash asked for is not there, and a column
    of that name that Delta does not generate (here all zeros) is not taken for it. Each file's
    hashes are computed from its key as it is read, so only the file holding a key of the batch
    has its keys read."""
    from pyspark.sql import functions as F

    from spark_jobs.transforms import KEY_HASH, key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    for keys in (["a", "b"], ["c"]):
        spark.createDataFrame([(k, "old") for k in keys], "k string, v string").coalesce(1).withColumn(
            KEY_HASH, F.lit(0).cast("bigint")).write.format("delta").mode("append").save(str(path))
    batch = spark.createDataFrame([("a", "new"), ("x", "new")], "k string, v string").withColumn(
        KEY_HASH, F.expr(expression))

    inserted = insert_absent(batch, path, ["k"], key_hash=expression)
    assert (inserted.rows, inserted.files_read, inserted.files_hashed, inserted.hashes_read) == (1, 1, 2, 2)
    assert sorted(r.k for r in table(spark, path).collect()) == ["a", "b", "c", "x"]


def test_a_write_thread_inserts_past_another_writers_checkpoint(spark, tmp_path: Path) -> None:
    """The stream writes from threads of its own, whose JVM threads (PySpark's pinned threads)
    carry no active Spark session. When another writer (a back-fill's driver, delta-rs) has
    committed and written a checkpoint since, such a thread is the first in the JVM to load that
    snapshot, and Delta reads a checkpoint only under an active session."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "t"
    spark.createDataFrame([("k0", "old", "d1")], SCHEMA).write.format("delta").save(str(path))
    assert insert_absent(spark.createDataFrame([("k1", "old", "d1")], SCHEMA), path, ["k"]).rows == 1
    write_deltalake(str(path), pa.table({"k": ["k2"], "v": ["other"], "day": ["d1"]}), mode="append")
    LogReader(str(path)).create_checkpoint()
    assert list((path / "_delta_log").glob("*.checkpoint.parquet")), "no checkpoint written"

    batch = spark.createDataFrame([("k2", "stream", "d1"), ("k3", "stream", "d1")], SCHEMA)
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(insert_absent, batch, path, ["k"]).result(300).rows == 1
    assert sorted(tuple(r) for r in table(spark, path).collect()) == [
        ("k0", "old", "d1"), ("k1", "old", "d1"), ("k2", "other", "d1"), ("k3", "stream", "d1")]


def test_each_files_key_hashes_are_read_once_and_kept_in_the_driver(spark, tmp_path: Path) -> None:
    """A batch reads the hash column only of the files it has not seen: the one the batch before
    wrote, or a compaction's. Every file's hashes are still compared, so a key of any file is found."""
    from delta.tables import DeltaTable

    from spark_jobs.transforms import key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    _hashed_table(spark, path, expression, [[f"k{i}" for i in range(f, f + 5)] for f in (0, 5, 10)])

    def insert(*keys: str):   # one file per batch
        return insert_absent(spark.createDataFrame([(k, "new") for k in keys], "k string, v string")
                             .coalesce(1), path, ["k"], key_hash=expression)

    first = insert("n1", "n2")
    assert (first.rows, first.files_hashed, first.hashes_read) == (2, 3, 3)
    # n1 stands in the file the batch before wrote: only that file's hashes are read, and they hold it
    second = insert("n1", "n3", "k7")
    assert (second.rows, second.files_read, second.files_hashed, second.hashes_read) == (1, 2, 4, 1)
    third = insert("n4")
    assert (third.rows, third.files_read, third.files_hashed, third.hashes_read) == (1, 0, 5, 1)
    # a compaction replaces every file: the one it writes is read once, and holds every key
    DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()
    compacted = insert("k0", "n3", "n5")
    assert (compacted.rows, compacted.files_read, compacted.files_hashed, compacted.hashes_read) == (
        1, 1, 1, 1)
    assert table(spark, path).count() == table(spark, path).select("k").distinct().count() == 20


def test_hashes_warmed_beside_a_parse_are_not_read_again_by_the_insert(spark, tmp_path: Path) -> None:
    """A micro-batch warms the cache with silver's unseen files while it parses: its insert then
    reads no hash and still finds every key. What the cache cannot hold is not warmed, and the
    insert scans it as before."""
    from spark_jobs.transforms import key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    _hashed_table(spark, path, expression, [[f"k{i}" for i in range(f, f + 5)] for f in (0, 5, 10)])
    assert warm_key_hashes(spark, path, expression) == 3
    assert warm_key_hashes(spark, path, expression) == 0     # every file held
    batch = spark.createDataFrame([("k1", "x"), ("k12", "x"), ("n1", "x")], "k string, v string")
    inserted = insert_absent(batch.coalesce(1), path, ["k"], key_hash=expression)
    assert (inserted.rows, inserted.files_read, inserted.files_hashed, inserted.hashes_read) == (1, 2, 3, 0)

    small = tmp_path / "small"
    _hashed_table(spark, small, expression, [[f"k{i}" for i in range(f, f + 5)] for f in (0, 5)])
    spark.conf.set("spark.weir.keyHashCache.maxBytes", "40b")   # five hashes: one file at most
    try:
        assert warm_key_hashes(spark, small, expression) <= 1
        again = insert_absent(batch, small, ["k"], key_hash=expression)
        assert (again.rows, again.files_hashed) == (2, 2) and again.hashes_read >= 1
    finally:
        spark.conf.unset("spark.weir.keyHashCache.maxBytes")
    assert table(spark, path).count() == 16 and table(spark, small).count() == 12


def test_files_the_key_hash_cache_cannot_hold_are_scanned_each_batch(spark, tmp_path: Path) -> None:
    """Past its capacity the cache keeps what fits and the other files' hashes are scanned per
    batch, as with no cache: slower, never inexact."""
    from spark_jobs.transforms import key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    _hashed_table(spark, path, expression, [[f"k{i}" for i in range(f, f + 5)] for f in (0, 5)])
    spark.conf.set("spark.weir.keyHashCache.maxBytes", "40b")   # five hashes: no file fits beside another
    try:
        batch = spark.createDataFrame([("k1", "x"), ("k6", "x"), ("n1", "x")], "k string, v string")
        assert insert_absent(batch, path, ["k"], key_hash=expression).rows == 1
        again = insert_absent(batch, path, ["k"], key_hash=expression)
        assert (again.rows, again.files_read, again.files_hashed) == (0, 3, 3)
        assert again.hashes_read >= 2   # at most one of the three files is held
    finally:
        spark.conf.unset("spark.weir.keyHashCache.maxBytes")
    assert table(spark, path).count() == 11


def test_a_restore_that_takes_a_deletion_vector_away_brings_its_rows_keys_back(spark, tmp_path: Path) -> None:
    """A file's hashes are kept with its deletion vector: a restore to before a delete gives the
    file its rows back, and a key of them is found again (kept under the file alone, the hashes
    read after the delete would miss it, and the key would stand twice)."""
    from delta.tables import DeltaTable

    from spark_jobs.transforms import key_hash_expression

    path, expression = tmp_path / "t", key_hash_expression(["k"])
    _hashed_table(spark, path, expression, [["a", "b", "c"]])
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    before_delete = LogReader(str(path)).version()
    DeltaTable.forPath(spark, str(path)).delete("k = 'b'")

    def insert(*keys: str):
        return insert_absent(spark.createDataFrame([(k, "new") for k in keys], "k string, v string"),
                             path, ["k"], key_hash=expression)

    assert insert("n1").rows == 1   # the file's hashes read with its vector: b's is not among them
    DeltaTable.forPath(spark, str(path)).restoreToVersion(before_delete)
    assert insert("b", "n2").rows == 1
    assert sorted(r.k for r in table(spark, path).collect()) == ["a", "b", "c", "n2"]


@pytest.mark.parametrize("bound", [None, "1b"], ids=["lists-kept", "lists-over-their-bound"])
def test_the_files_a_write_reads_follow_every_commit_since_the_last_write(
        spark, tmp_path: Path, bound: str | None) -> None:
    """A write lists the table's files from the driver's list of the version it last saw, brought
    forward by the commits since (`weir.LiveFiles`). Each step here makes a commit that a list
    missing its adds, keeping its removes or taking a file without its deletion vector would get
    wrong, and the batch after it would then insert a key that stands (or lose one that does not):
    a compaction, a delete by deletion vector, a restore that takes the vector away, and a table
    dropped and made again at the same path, past the version the driver had listed. Over the
    lists' bound nothing is kept, and Delta lists and skips the files itself, as before."""
    if bound is None:
        spark.conf.unset(LIVE_FILES_BYTES)
    else:
        spark.conf.set(LIVE_FILES_BYTES, bound)
    try:
        _follow_every_commit(spark, tmp_path / "t")
    finally:
        spark.conf.unset(LIVE_FILES_BYTES)


def _follow_every_commit(spark, path: Path) -> None:
    import shutil

    from delta.tables import DeltaTable

    def insert(*keys: str) -> int:
        batch = spark.createDataFrame([(k, "v", "d1") for k in keys], SCHEMA)
        return insert_absent(batch, path, ["k"], prune="t.day = 'd1'").rows

    def keys() -> list[str]:
        return sorted(r.k for r in table(spark, path).collect())

    spark.createDataFrame([("k0", "v", "d1")], SCHEMA).write.format("delta").partitionBy("day").save(
        str(path))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    assert [insert("k1"), insert("k2"), insert("k3")] == [1, 1, 1]   # one file each, listed
    spark.sql(f"OPTIMIZE delta.`{path}`")                 # the four files removed, one added
    assert insert("k1", "k4") == 1
    before_delete = LogReader(str(path)).version()
    DeltaTable.forPath(spark, str(path)).delete("k = 'k2'")   # the file again, with a vector
    assert insert("k2", "k5") == 2
    DeltaTable.forPath(spark, str(path)).restoreToVersion(before_delete)   # the vector gone
    assert insert("k2", "k5", "k6") == 2
    assert keys() == ["k0", "k1", "k2", "k3", "k4", "k5", "k6"]

    listed = LogReader(str(path)).version()
    shutil.rmtree(path)
    spark.createDataFrame([("n0", "v", "d1")], SCHEMA).write.format("delta").partitionBy("day").save(
        str(path))
    while LogReader(str(path)).version() < listed + 1:    # past the version the driver listed
        spark.createDataFrame([("n0", "v", "d2")], SCHEMA).write.format("delta").mode("append").save(
            str(path))
    assert insert("k1", "n0") == 1
    assert sorted(set(keys())) == ["k1", "n0"]
