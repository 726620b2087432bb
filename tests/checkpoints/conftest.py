"""A real `playback` pipeline per test: landing files from the generator, the stream run in-process
on the session's Spark, and the exactly-once expectations of what was written."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spark_jobs import catalog, stream
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.topology import checkpoint_location
from tests.helpers import assert_exactly_once, landing_keys, table

START = dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)


def write_checkpoint(home: WeirHome, *, planned: int = 3, committed: int = 2,
                     pipeline: str = "playback") -> None:
    """A gold-like checkpoint mid-batch: offsets 0..planned, commits 0..committed, state versions
    1..planned+1 (the in-flight batch already wrote its state), and a temporary file."""
    folder = checkpoint_location(home, catalog.load(pipeline), "gold")
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    (folder / "metadata").write_text(json.dumps({"id": "q-1"}))
    for batch in range(planned + 1):
        (folder / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"reservoirVersion":1,"index":-1}')
        (folder / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in range(committed + 1):
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    partition = folder / "state" / "0" / "0"
    partition.mkdir(parents=True)
    for version in range(1, planned + 2):
        (partition / f"{version}.changelog").write_bytes(b"x" * 10)
    (folder / "commits" / f".{planned}.0b1c.tmp").write_text("v1\n")


@dataclass
class Playback:
    """The pipeline under test and everything its landing folder received."""

    spark: object
    home: WeirHome
    files: list[Path] = field(default_factory=list)
    event_ids: set[str] = field(default_factory=set)
    batches: int = 0

    @property
    def pipeline(self) -> catalog.Pipeline:
        return catalog.load("playback")

    @property
    def tables(self) -> PipelineTables:
        return PipelineTables.of(self.home, self.pipeline)

    def land(self, tag: str, *, hour: int, files: int = 2, mtime: float | None = None) -> set[str]:
        """Land `files` files of sessions starting at START + `hour` hours; returns their ids."""
        written = generate(self.home.landing("playback"), files=files, sessions_per_file=4,
                           seed=self.batches + 1, prefix=tag, start=START + dt.timedelta(hours=hour))
        self.batches += 1
        if mtime is not None:
            import os

            for f in written.files:
                os.utime(f, (mtime, mtime))
        self.files += written.files
        self.event_ids |= written.event_ids
        return written.event_ids

    def run(self, pipeline: catalog.Pipeline | None = None) -> None:
        stream.run(pipeline or self.pipeline, once=True, home=self.home, spark=self.spark)

    def assert_exactly_once(self, files: list[Path] | None = None, event_ids: set[str] | None = None) -> None:
        """Bronze holds every line of `files` once, silver every event of `event_ids` once, gold
        one row per window key and equal to the aggregate of silver (what a back-fill computes)."""
        from pyspark.testing import assertDataFrameEqual

        from spark_jobs import transforms

        files = self.files if files is None else files
        event_ids = self.event_ids if event_ids is None else event_ids
        bronze = table(self.spark, self.tables.bronze)
        assert_exactly_once(bronze, ["source", "position"], landing_keys(files), "bronze")
        silver = table(self.spark, self.tables.silver)
        assert_exactly_once(silver, ["event_id"], event_ids, "silver")
        quarantine = table(self.spark, self.tables.quarantine)
        assert quarantine.count() == quarantine.select("source", "position").distinct().count()
        gold = table(self.spark, self.tables.gold)
        key = list(transforms.gold_key(self.pipeline))
        assert gold.count() == gold.select(*key).distinct().count(), "gold: a window key twice"
        assertDataFrameEqual(gold, transforms.aggregate(silver, self.pipeline), checkRowOrder=False)


@pytest.fixture
def playback(spark, home: WeirHome) -> Playback:
    return Playback(spark, home)
