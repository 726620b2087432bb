"""A back-fill beside the stream loses nothing the stream committed (issue 12, scenario 4), and a
back-fill re-derives quarantine as well as silver, so after a rule change every bronze line of
the dates is in exactly one of silver or quarantine (scenario 7).

The race is forced, not hoped for: the back-fill's `hold` callback parks it between its read of
bronze and its write, while a stream micro-batch for the same date commits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import threading
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_jobs import stream, transforms
from spark_jobs.backfill import backfill
from spark_jobs.catalog import Pipeline
from spark_jobs.control.maintenance import Compacted, compact
from spark_jobs.generator import generate
from spark_jobs.layers import (
    PipelineTables,
    ensure_tables,
    one_value_per_file,
    read_dimension,
    skipping_order,
)
from spark_jobs.quality import rules as row_rules
from tests.helpers import assert_exactly_once, table
from tests.integration.batches import differs, ingest
from tests.integration.pipelines import playback

pytestmark = pytest.mark.slow
DAY = dt.date(2026, 11, 19)
HOLD_S = 120.0


def damage(spark: SparkSession, tables: PipelineTables) -> None:
    """Delete some rows of every layer, so that a back-fill has something to write to each."""
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, str(tables.silver)).delete("event_type = 'heartbeat'")
    # only lines of DAY (the generator's bad lines with an event time are of the next day)
    DeltaTable.forPath(spark, str(tables.quarantine)).delete(
        "position % 2 = 0 AND value NOT LIKE '%2026-11-20T%'")
    DeltaTable.forPath(spark, str(tables.gold)).delete("events > 2")


def derived_from_bronze(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables
                        ) -> tuple[DataFrame, DataFrame]:
    """(silver, quarantine) as the shared transforms make them from the whole of bronze."""
    parsed = row_rules.with_rules(transforms.parse(table(spark, tables.bronze), pipeline),
                                  pipeline.row_rules)
    return (transforms.silver(parsed, read_dimension(spark, tables), pipeline),
            transforms.rejects(parsed))


def assert_layers_exact(spark: SparkSession, pipeline: Pipeline, tables: PipelineTables,
                        valid_ids: set[str]) -> None:
    """silver = distinct valid events of all bronze, quarantine = every rejected line once,
    gold = the aggregates of silver; and each bronze line is in silver, quarantine or is a
    duplicate of an event in silver."""
    silver, quarantine = table(spark, tables.silver), table(spark, tables.quarantine)
    assert_exactly_once(silver, (pipeline.key,), valid_ids, "silver")
    want_silver, want_quarantine = derived_from_bronze(spark, pipeline, tables)
    assert not (d := differs(silver, want_silver)), f"silver: {d}"
    assert_exactly_once(quarantine, transforms.BRONZE_KEY,
                        {tuple(r) for r in want_quarantine.select(*transforms.BRONZE_KEY).collect()},
                        "quarantine")
    assert not (d := differs(quarantine.drop("ingest_time"), want_quarantine.drop("ingest_time"))), \
        f"quarantine: {d}"
    assert not (d := differs(table(spark, tables.gold), transforms.aggregate(silver, pipeline))), f"gold: {d}"


class Hold:
    """A `hold` callback for `backfill` that parks it before writing `layer` until released."""

    def __init__(self, layer: str) -> None:
        self.layer = layer
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, layer: str) -> None:
        if layer == self.layer and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(HOLD_S), "the test never released the back-fill"


def run_in_thread(action, failures: list[BaseException]) -> threading.Thread:
    def target() -> None:
        try:
            action()
        except BaseException as err:
            failures.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_layers_that_read_no_other_are_reconciled_side_by_side(spark, home, tmp_path):
    """Silver and quarantine (each from the lines read), then gold and the sessions (each from
    silver): the back-fill reaches each one's write only while its partner is at its own, which a
    back-fill that ran them one after another never does (the barrier times out)."""
    pipeline = playback(files_per_trigger=2)
    tables = ensure_tables(spark, home, pipeline)
    written = generate(tmp_path, files=2, sessions_per_file=4, seed=71, bad_ratio=0.1)
    ingest(spark, pipeline, tables, written.files, dt.datetime(2026, 11, 19, 20, 30, tzinfo=dt.UTC), 0)
    damage(spark, tables)
    from_lines, from_silver = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)
    partners = {"silver": from_lines, "quarantine": from_lines, "gold": from_silver, "sessions": from_silver}
    met: list[str] = []

    def hold(layer: str) -> None:
        if layer not in met:       # gold's later rounds, if any, pass
            met.append(layer)
            partners[layer].wait()

    backfill(spark, pipeline, DAY, DAY, home=home, hold=hold)
    assert sorted(met) == ["gold", "quarantine", "sessions", "silver"]
    assert set(met[:2]) == {"silver", "quarantine"}, met
    assert_layers_exact(spark, pipeline, tables, written.event_ids)


@pytest.mark.parametrize("layer", ["silver", "quarantine", "gold"])
def test_stream_commit_between_backfill_read_and_write_is_kept(spark, home, tmp_path, layer):
    pipeline = playback(files_per_trigger=2)
    tables = ensure_tables(spark, home, pipeline)
    written = generate(tmp_path / "first", files=2, sessions_per_file=4, seed=51, bad_ratio=0.1)
    ingest(spark, pipeline, tables, written.files, dt.datetime(2026, 11, 19, 20, 30, tzinfo=dt.UTC), 0)
    backfill(spark, pipeline, DAY, DAY, home=home)
    damage(spark, tables)
    # a new file of the same date, which the stream ingests while the back-fill is parked
    late = generate(tmp_path / "elsewhere", files=1, sessions_per_file=4, seed=52, bad_ratio=0.2,
                    start=dt.datetime(2026, 11, 19, 20, 3, tzinfo=dt.UTC))
    written.add(late)

    hold, failures = Hold(layer), []
    worker = run_in_thread(lambda: backfill(spark, pipeline, DAY, DAY, home=home, hold=hold), failures)
    try:
        assert hold.reached.wait(HOLD_S), f"the back-fill never reached its {layer} write: {failures}"
        ingest(spark, pipeline, tables, late.files, dt.datetime(2026, 11, 19, 21, 0, tzinfo=dt.UTC), 1)
        if layer == "gold":
            stream.GoldBatch(pipeline, tables)(
                transforms.aggregate(table(spark, tables.silver), pipeline), 1000)
    finally:
        hold.release.set()
        worker.join(HOLD_S)
    assert not failures, failures
    assert_layers_exact(spark, pipeline, tables, written.event_ids)


def test_backfill_after_a_rule_change_moves_lines_between_silver_and_quarantine(spark, home, tmp_path):
    pipeline = playback(files_per_trigger=2)
    tables = ensure_tables(spark, home, pipeline)
    written = generate(tmp_path, files=2, sessions_per_file=4, seed=61)
    ingest(spark, pipeline, tables, written.files, dt.datetime(2026, 11, 19, 20, 30, tzinfo=dt.UTC), 0)
    backfill(spark, pipeline, DAY, DAY, home=home)
    bitrates = [r[0] for r in table(spark, tables.silver).where("bitrate_kbps IS NOT NULL")
                .select("bitrate_kbps").distinct().orderBy("bitrate_kbps").collect()]
    assert len(bitrates) > 2
    limit = bitrates[len(bitrates) // 2]

    # tighten the contract: a bitrate above `limit` is now out of range
    tight = dataclasses.replace(pipeline, fields=tuple(
        dataclasses.replace(f, maximum=limit) if f.name == "bitrate_kbps" else f for f in pipeline.fields))
    moved = {r[0] for r in table(spark, tables.silver).where(f"bitrate_kbps > {limit}")
             .select("event_id").collect()}
    assert moved
    backfill(spark, tight, DAY, DAY, home=home)
    assert_layers_exact(spark, tight, tables, written.event_ids - moved)
    reasons = table(spark, tables.quarantine).where("reason LIKE 'bitrate_kbps out of range%'")
    assert reasons.count() >= len(moved)

    # and back: the original contract puts them in silver again, out of quarantine
    backfill(spark, pipeline, DAY, DAY, home=home)
    assert_layers_exact(spark, pipeline, tables, written.event_ids)
    assert reasons.count() == 0


def test_backfills_and_compactions_while_files_arrive_lose_and_double_nothing(spark, home, tmp_path):
    """Randomized: several back-fills, each beside a stream batch that commits at a random point
    of it and a compaction of every table that starts at another (each on its own thread, started
    after a random delay): the batch and the back-fill retry what the compaction removed from
    under them, the compaction what they did."""
    pipeline = playback(files_per_trigger=2)
    tables = ensure_tables(spark, home, pipeline)
    written = generate(tmp_path / "first", files=2, sessions_per_file=4, seed=71)
    ingest(spark, pipeline, tables, written.files, dt.datetime(2026, 11, 19, 20, 30, tzinfo=dt.UTC), 0)
    backfill(spark, pipeline, DAY, DAY, home=home)
    rng = random.Random(71)
    compactions: list[Compacted] = []
    for wave in range(3):
        extra = generate(tmp_path / f"wave{wave}", files=1, sessions_per_file=4, seed=72 + wave,
                         prefix=f"w{wave}", start=dt.datetime(2026, 11, 19, 20, rng.randrange(0, 50),
                                                               tzinfo=dt.UTC))
        written.add(extra)
        failures: list[BaseException] = []
        delay = rng.uniform(0.0, 6.0)

        def arrive(files: list[Path] = extra.files, delay: float = delay, wave: int = wave) -> None:
            threading.Event().wait(delay)
            ingest(spark, pipeline, tables, files, dt.datetime(2026, 11, 19, 22, wave, tzinfo=dt.UTC),
                   1 + wave)

        def compact_all(delay: float = rng.uniform(0.0, 6.0)) -> None:
            threading.Event().wait(delay)
            outputs = tables.outputs()
            for layer, order in skipping_order(pipeline).items():   # as `weir maintain` does
                compactions.append(compact(spark, outputs[layer], order, cut=one_value_per_file().get(layer)))

        damage(spark, tables)
        ingester, compactor = run_in_thread(arrive, failures), run_in_thread(compact_all, failures)
        backfill(spark, pipeline, DAY, DAY, home=home)
        ingester.join(HOLD_S)
        compactor.join(HOLD_S)
        assert not failures, failures
    assert sum(c.files_removed for c in compactions) > 0, compactions
    silver = table(spark, tables.silver)
    assert_exactly_once(silver, (pipeline.key,), written.event_ids, "silver")
    want_silver, want_quarantine = derived_from_bronze(spark, pipeline, tables)
    assert not (d := differs(silver, want_silver)), f"silver: {d}"
    assert not (d := differs(table(spark, tables.quarantine), want_quarantine)), f"quarantine: {d}"
    # gold is exact for late data once a back-fill of the date has run after the last batch
    backfill(spark, pipeline, DAY, DAY, home=home)
    assert_layers_exact(spark, pipeline, tables, written.event_ids)

