"""`tables.insert_absent` with a key index (the stream's silver write): it answers exactly as a
read of the table's keys would, whatever changed the table since its last use (another writer's
commit, a MERGE that moves a key to another file, a RESTORE that brings an old file back, an
OPTIMIZE, a delete by deletion vector, another table at the same path, a crash that lost its
registrations), and reads only the files it has not seen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from spark_jobs.tables import close_key_indexes, insert_absent, upsert
from tests.helpers import table

SCHEMA = "k string, v string, day string"


def write(spark, path: Path, rows: list[tuple[str, str, str]]) -> None:
    spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("delta").mode("append").partitionBy(
        "day").save(str(path))


def insert(spark, path: Path, index: Path, keys: list[str]) -> tuple[int, int]:
    """Insert a row for each of `keys` (value "new", under day d9) through the index: (rows
    inserted, files whose keys were read)."""
    batch = spark.createDataFrame([(k, "new", "d9") for k in keys], SCHEMA)
    done = insert_absent(batch, path, ["k"], index=index)
    return done.rows, done.files_read


def keys_of(spark, path: Path) -> list[str]:
    return sorted(r.k for r in table(spark, path).select("k").collect())


@pytest.fixture
def silver(spark, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    path, index = tmp_path / "silver", tmp_path / "index"
    write(spark, path, [("k1", "old", "d1"), ("k2", "old", "d1")])
    write(spark, path, [("k3", "old", "d2")])
    yield path, index
    close_key_indexes(spark)


def test_the_index_reads_only_the_files_committed_since_its_last_use(spark, silver) -> None:
    path, index = silver
    # first use: every file is new to it
    assert insert(spark, path, index, ["k1", "k4"]) == (1, 2)
    # another writer's commit since (a back-fill's): its key is held, and only its file is read;
    # the index's own insert of k4 is the other file new to it
    write(spark, path, [("k5", "other", "d3")])
    assert insert(spark, path, index, ["k5", "k4", "k3", "k6"]) == (1, 2)
    assert insert(spark, path, index, ["k6"]) == (0, 1)
    assert keys_of(spark, path) == ["k1", "k2", "k3", "k4", "k5", "k6"]


def test_a_key_moved_by_a_merge_and_brought_back_by_a_restore_is_held(spark, silver) -> None:
    """The index follows a key into the file a MERGE rewrote it to; a RESTORE then makes the
    original file live again, and the index must answer from it, not from the dead rewrite."""
    path, index = silver
    insert(spark, path, index, ["k4"])
    before_merge = DeltaTable.forPath(spark, str(path)).history(1).first().version
    upsert(spark.createDataFrame([("k1", "rewritten", "d1")], SCHEMA), path, ["k"])
    assert insert(spark, path, index, ["k1"])[0] == 0
    DeltaTable.forPath(spark, str(path)).restoreToVersion(before_merge)
    assert insert(spark, path, index, ["k1", "k2", "k7"])[0] == 1
    assert keys_of(spark, path) == ["k1", "k2", "k3", "k4", "k7"]


def test_an_optimize_and_a_delete_are_followed(spark, silver) -> None:
    """OPTIMIZE rewrites every key into new files; a DELETE by deletion vector leaves the file live
    with a key gone, and that key is absent again."""
    path, index = silver
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    insert(spark, path, index, ["k4"])
    DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()
    assert insert(spark, path, index, ["k1", "k2", "k3", "k4"])[0] == 0
    DeltaTable.forPath(spark, str(path)).delete("k = 'k2'")
    adds = [json.loads(line).get("add") for f in sorted((path / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()]
    assert any(add and add.get("deletionVector") for add in adds), "the delete left no deletion vector"
    assert insert(spark, path, index, ["k1", "k2", "k3"])[0] == 1
    assert keys_of(spark, path) == ["k1", "k2", "k3", "k4"]


def test_an_index_of_another_table_is_made_afresh(spark, silver, tmp_path: Path) -> None:
    path, index = silver
    insert(spark, path, index, ["k4"])
    other = tmp_path / "other"
    write(spark, other, [("k4", "other", "d1")])
    # the index held k1-k4 under the first table's files; this table holds only k4
    assert insert(spark, other, index, ["k1", "k4"]) == (1, 1)
    assert keys_of(spark, other) == ["k1", "k4"]


def test_registrations_a_crash_lost_are_read_again(spark, silver) -> None:
    """A crash after a file's keys were written but before the file was registered leaves it
    unregistered (`KeyIndex`'s order of writes): the next use reads it again."""
    path, index = silver
    insert(spark, path, index, ["k4"])
    close_key_indexes(spark)   # as at a driver's end: the process no longer holds it
    jvm = spark.sparkContext._gateway.jvm
    db = jvm.org.rocksdb.RocksDB.open(str(index))
    try:
        it = db.newIterator()
        it.seek(bytearray(b"f"))
        registered = []
        while it.isValid() and bytes(it.key())[:1] == b"f":
            registered.append(bytes(it.key()))
            it.next()
        it.close()
        assert len(registered) == 2, "the two files the first use read are registered"
        for name in registered:
            db.delete(bytearray(name))
    finally:
        db.close()
    assert insert(spark, path, index, ["k1", "k2", "k4", "k8"]) == (1, 3)
    assert keys_of(spark, path) == ["k1", "k2", "k3", "k4", "k8"]


def test_an_index_another_process_holds_leaves_the_insert_to_read_the_table(spark, silver) -> None:
    path, index = silver
    insert(spark, path, index, ["k4"])
    close_key_indexes(spark)
    jvm = spark.sparkContext._gateway.jvm
    held = jvm.org.rocksdb.RocksDB.open(str(index))   # as a fenced-out driver still running would
    try:
        assert insert(spark, path, index, ["k1", "k5"]) == (1, 3)   # every file read
    finally:
        held.close()
    # the index again: the files of k4 and k5 are new to it
    assert insert(spark, path, index, ["k5", "k6"]) == (1, 2)
    assert keys_of(spark, path) == ["k1", "k2", "k3", "k4", "k5", "k6"]
