"""The landing folder under volume and hostile files: batches bounded by bytes (a file larger than
the bound spans batches, through kill -9), progress counted in records, and files that a
file-modification-time or whole-file reader would lose or half-read — every line ends in bronze
once and in exactly one of silver or quarantine, with its reason."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time

import pytest
from pyspark.sql import functions as F

from spark_jobs import landing, stream, transforms
from spark_jobs.control import progress
from spark_jobs.generator import generate, write_lines
from spark_jobs.layers import PipelineTables
from tests.helpers import assert_exactly_once, landing_keys, table
from tests.integration.pipelines import playback, write_catalog
from tests.integration.test_exactly_once import (
    assert_all_layers_exactly_once,
    batch_files,
    exited,
    start_driver,
)
from tests.support.polling import wait_for

EVENT = {"session_id": "s-h", "user_id": "u-h", "content_id": "c001", "event_type": "heartbeat",
         "event_time": "2026-11-19T21:00:00Z"}


def event(event_id: str, **changes: str) -> str:
    return json.dumps({"event_id": event_id, **EVENT, **changes}, separators=(",", ":"))


def ingest_batches(home) -> list[dict]:
    return [r for r in progress.read(home, "playback")
            if r["query"] == "playback_ingest" and r["num_input_rows"]]


@pytest.mark.slow
def test_a_file_larger_than_the_batch_bound_spans_batches_and_lands_once_through_kill_9(
        spark, home, tmp_path):
    bound = 16 << 10
    pipeline = playback(files_per_trigger=None, max_bytes_per_trigger=bound)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=None, max_bytes_per_trigger=bound)
    written = generate(home.landing("playback"), files=1, sessions_per_file=30, seed=21)
    size = written.files[0].stat().st_size
    assert size > 4 * bound, f"the file ({size} bytes) must span several batches of {bound}"
    driver = start_driver(home, conf)
    try:
        wait_for("a first committed batch of the big file", lambda: batch_files(home, pipeline, "commits"),
                 600, poll_s=0.1, abort=exited(driver))
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    assert driver.returncode == -signal.SIGKILL
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_all_layers_exactly_once(spark, home, pipeline, written)
    assert len(batch_files(home, pipeline, "commits")) >= size // bound, \
        "a file larger than the bound is read in several micro-batches"


def test_a_backlog_is_split_into_bounded_batches_and_progress_counts_lines(spark, home):
    bound = 24 << 10
    pipeline = playback(files_per_trigger=None, max_bytes_per_trigger=bound)
    written = generate(home.landing("playback"), files=5, sessions_per_file=6, seed=22)
    total = sum(f.stat().st_size for f in written.files)
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_all_layers_exactly_once(spark, home, pipeline, written)
    time.sleep(1)   # progress rows are written by the listener, off the query thread
    batches = ingest_batches(home)
    assert sum(r["num_input_rows"] for r in batches) == written.lines, \
        "progress counts lines, not files"
    assert len(batches) >= total // bound, f"{len(batches)} batches for {total} bytes, bound {bound}"
    largest_line = max(len(line) for f in written.files for line in f.read_bytes().split(b"\n")) + 1
    lines_per_batch_max = (bound + largest_line) // min(
        len(line) + 1 for f in written.files for line in f.read_bytes().split(b"\n") if line)
    assert max(r["num_input_rows"] for r in batches) <= lines_per_batch_max


def test_a_batch_is_cut_over_the_cores_inside_its_files_and_reads_each_line_once(spark, tmp_path):
    written = generate(tmp_path / "landing", files=3, sessions_per_file=6, seed=23)
    options = {"path": str(tmp_path / "landing"), "manifest": str(tmp_path / "manifest"),
               "minBytesPerPartition": "1k"}
    batches: list[tuple[int, list]] = []

    def collect(batch, batch_id):
        batches.append((batch.rdd.getNumPartitions(), batch.select("source", "position").collect()))

    query = (landing.read_stream(spark, options).writeStream.foreachBatch(collect)
             .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .start())
    query.awaitTermination()
    assert [tasks for tasks, _ in batches] == [spark.sparkContext.defaultParallelism], \
        "one batch, as many tasks as the session has cores"
    lines = [(row["source"], row["position"]) for row in batches[0][1]]
    assert len(lines) == len(set(lines)) and set(lines) == landing_keys(written.files)


def expected_lines(path, keep: int) -> dict[tuple[str, int], tuple[str, int | None]]:
    """(file name, position) → (value, line_bytes) as the reader must yield each line of `path`,
    keeping at most `keep` bytes of a line, computed here from the bytes."""
    data, lines, start = path.read_bytes(), {}, 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        kept = line if len(line) <= keep else line[:keep].decode("utf-8", "ignore").encode()
        lines[(path.name, start)] = (kept.decode(), None if kept is line else len(line))
        start = end + 1
    return lines


def test_a_line_longer_than_the_reader_keeps_is_cut_alike_wherever_the_tasks_begin(spark, tmp_path):
    """A task holds at most `maxLineBytes` of a line: a longer one is cut at a character's start,
    its whole length given, and the lines after it read as ever. Ranges of 1 KB (five tasks inside
    one line) and one range per file yield the very same rows."""
    keep = 1000
    landing_dir = tmp_path / "landing"
    landing_dir.mkdir()
    files = [landing_dir / "long.jsonl", landing_dir / "unterminated.jsonl"]
    files[0].write_bytes(b"\n".join([
        b"first", b"a" * 5000, b"b" * keep, b"c" * (keep + 1),
        ("x" + "\u00e9" * 700).encode(),      # byte 999 starts a two-byte character: 999 kept
        b"d" * keep + b"\r", b"last"]) + b"\n")
    files[1].write_bytes(b"tail\n" + b"z" * 3000)
    expected = {k: v for f in files for k, v in expected_lines(f, keep).items()}

    def read(name: str, **options: str) -> dict:
        rows = []
        query = (landing.read_stream(spark, {"path": str(landing_dir), "manifest": str(tmp_path / name),
                                             "maxLineBytes": str(keep), **options})
                 .writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
                 .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / f"{name}-cp"))
                 .start())
        query.awaitTermination()
        return {(r.source.split("#")[0].rsplit("/", 1)[1], r.position): (r.value, r.line_bytes)
                for r in rows}

    small_tasks = read("small", maxBytesPerPartition="1k", minBytesPerPartition="1k")
    whole_files = read("whole")
    assert small_tasks == whole_files == expected
    assert expected[("long.jsonl", 6)] == ("a" * keep, 5000)
    assert len(expected[("long.jsonl", 5 + 1 + 5000 + 1 + keep + 1 + keep + 2)][0].encode()) == 999
    assert expected[("unterminated.jsonl", 5)] == ("z" * keep, 3000)


def test_a_line_longer_than_the_reader_keeps_is_quarantined_with_its_length(spark, home):
    """A line past `transforms.MAX_LINE_BYTES` (a file without line breaks): bronze keeps its
    first bytes and its length, quarantine says why, the lines around it are ingested."""
    pipeline = playback(files_per_trigger=None)
    written = generate(home.landing("playback"), files=1, sessions_per_file=3, seed=27)
    size = transforms.MAX_LINE_BYTES + 1_000_000
    big = ('{"event_id":"big","junk":"' + "a" * (size - 28) + '"}').encode()
    assert len(big) == size
    path = home.landing("playback") / "big.jsonl"
    path.write_bytes(event("before-big").encode() + b"\n" + big + b"\n" + event("after-big").encode() + b"\n")
    stream.run(pipeline, once=True, home=home, spark=spark)

    tables = PipelineTables.of(home, pipeline)
    position = len(event("before-big")) + 1
    assert_exactly_once(table(spark, tables.bronze), ("source", "position"),
                        landing_keys([*written.files, path]), "bronze")
    [cut] = (table(spark, tables.bronze).where(F.col("position") == position)
             .where(F.col("source").contains("big.jsonl"))
             .select(F.octet_length("value").alias("kept"), "line_bytes").collect())
    assert (cut.kept, cut.line_bytes) == (transforms.MAX_LINE_BYTES, size)
    reasons = {r.position: r.reason for r in table(spark, tables.quarantine)
               .where(F.col("source").contains("big.jsonl")).collect()}
    assert reasons == {position: f"record larger than {transforms.MAX_RECORD_CHARS} characters: a line "
                                 f"of {size} bytes, kept as its first {transforms.MAX_LINE_BYTES} in "
                                 "bronze and quarantine"}
    assert_exactly_once(table(spark, tables.silver), ("event_id",),
                        written.event_ids | {"before-big", "after-big"}, "silver")


def test_hostile_files_are_accounted_for_line_by_line(spark, home):
    """Old modification times, a re-dropped name with new content, a byte-order mark, CRLF,
    invalid UTF-8, two objects or junk on a line, an event from the future: after two rounds,
    bronze = every line of every file version once, silver = the distinct valid events,
    quarantine = exactly the rejected lines with their reasons, gold = the aggregates of silver
    (the future event did not carry the watermark away)."""
    pipeline = playback(files_per_trigger=None)
    landing = home.landing("playback")
    first = generate(landing, files=2, sessions_per_file=4, seed=23)
    versions = list(first.files)
    replaced = first.files[0]
    old_version = landing_keys([replaced])
    stream.run(pipeline, once=True, home=home, spark=spark)

    hostile: dict[str, str | None] = {}      # value as the reader yields it -> reason (None = valid)

    def line(text: str, reason: str | None) -> str:
        hostile[text] = reason
        return text

    bom = landing / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (line(event("h-bom"), None) + "\r\n").encode()
                    + (line(event("h-crlf"), None) + "\r\n").encode())
    junk = write_lines(landing, "junk.jsonl", [
        line(event("h-two-a") + event("h-two-b"), "malformed JSON: more than one JSON value on the line"),
        line(event("h-junk") + " trailing junk", "malformed JSON: trailing characters after the object"),
        line(event("h-future", event_time="2099-01-01T00:00:00Z"),
             "event_time more than 1 hour ahead of ingest time: 2099-01-01T00:00:00Z"),
        line(event("h-ok"), None),
    ])
    invalid = landing / "invalid.jsonl"
    raw = event("h-bytes", device="tv").encode().replace(b'"tv"', b'"t\xffv"')
    invalid.write_bytes(raw + b"\n" + (line(event("h-after-bytes"), None) + "\n").encode())
    hostile[raw.decode("utf-8", "replace")] = "invalid UTF-8"
    old = generate(landing, files=1, sessions_per_file=3, seed=24, prefix="old")
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old.files[0], (ten_days_ago, ten_days_ago))
    redropped = generate(landing, files=1, sessions_per_file=3, seed=25, prefix="new")
    os.replace(redropped.files[0], replaced)                    # same name, new content
    versions += [bom, junk, invalid, old.files[0]]
    stream.run(pipeline, once=True, home=home, spark=spark)

    # Round 2 had the future event; round 3's ordinary events must still reach gold.
    later = generate(landing, files=1, sessions_per_file=3, seed=26, prefix="later",
                     start=dt.datetime(2026, 11, 19, 22, 0, tzinfo=dt.UTC))  # after every event so far
    stream.run(pipeline, once=True, home=home, spark=spark)

    tables = PipelineTables.of(home, pipeline)
    expected_bronze = old_version | landing_keys([*versions, *later.files])
    assert_exactly_once(table(spark, tables.bronze), ("source", "position"), expected_bronze, "bronze")

    valid_ids = (first.event_ids | old.event_ids | redropped.event_ids | later.event_ids
                 | {json.loads(text)["event_id"] for text, reason in hostile.items() if reason is None})
    silver = table(spark, tables.silver)
    assert_exactly_once(silver, ("event_id",), valid_ids, "silver")

    quarantine = table(spark, tables.quarantine)
    assert quarantine.count() == quarantine.select("source", "position").distinct().count()
    generated_bad = first.bad_lines + old.bad_lines + redropped.bad_lines + later.bad_lines
    assert quarantine.count() == generated_bad + sum(r is not None for r in hostile.values())
    got = {r.value: r.reason for r in quarantine.collect() if r.value in hostile}
    assert got == {text: reason for text, reason in hostile.items() if reason is not None}
    kept = quarantine.where(F.col("reason") == "invalid UTF-8").select("raw_bytes").first()
    assert kept is not None and bytes(kept.raw_bytes) == raw, "the invalid bytes are kept as they came"
    accepted = table(spark, tables.bronze).join(quarantine, ["source", "position"], "left_anti")
    accepted_ids = {r[0] for r in accepted.select(F.get_json_object("value", "$.event_id")).collect()}
    assert accepted_ids == valid_ids, "a bronze line is in neither silver (by its event) nor quarantine"

    gold = table(spark, tables.gold)
    recomputed = transforms.aggregate(silver, pipeline)
    assert gold.exceptAll(recomputed).isEmpty() and recomputed.exceptAll(gold).isEmpty(), \
        "gold differs from the aggregates of silver (a future event moved the watermark?)"
    assert gold.agg(F.sum("events")).first()[0] == len(valid_ids)


def test_a_landing_file_is_read_whatever_its_age_relative_to_files_already_read(spark, home):
    pipeline = playback(files_per_trigger=None)
    landing = home.landing("playback")
    newer = generate(landing, files=1, sessions_per_file=2, seed=27, prefix="newer")
    stream.run(pipeline, once=True, home=home, spark=spark)
    older = generate(landing, files=1, sessions_per_file=2, seed=28, prefix="older")
    a_year_ago = time.time() - 365 * 86400
    os.utime(older.files[0], (a_year_ago, a_year_ago))
    stream.run(pipeline, once=True, home=home, spark=spark)
    tables = PipelineTables.of(home, pipeline)
    assert_exactly_once(table(spark, tables.bronze), ("source", "position"),
                        landing_keys([*newer.files, *older.files]), "bronze")
    assert_exactly_once(table(spark, tables.silver), ("event_id",),
                        newer.event_ids | older.event_ids, "silver")
