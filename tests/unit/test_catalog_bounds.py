"""A source's batch bounds are checked when its catalog entry loads: a bound of 0, a negative one
or one of the wrong type is refused with the entry and the setting named, instead of reading as
"unbounded" (Kafka's opt-out is None, written on purpose) or failing only when the stream starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from spark_jobs import catalog
from spark_jobs.catalog import CatalogError, FileSource, KafkaSource, derived_entry


@pytest.mark.parametrize(("make", "message"), [
    (lambda: FileSource(max_bytes_per_trigger=0),
     "files source: max_bytes_per_trigger must be a positive whole number, not 0"),
    (lambda: FileSource(max_bytes_per_trigger=None),
     "files source: max_bytes_per_trigger must be a positive whole number, not None"),
    (lambda: FileSource(max_bytes_per_partition=-1),
     "files source: max_bytes_per_partition must be a positive whole number, not -1"),
    (lambda: FileSource(max_files_per_trigger=0),
     "files source: max_files_per_trigger must be a positive whole number or None, not 0"),
    (lambda: FileSource(max_bytes_per_trigger="128MB"),
     "files source: max_bytes_per_trigger must be a positive whole number, not '128MB'"),
    (lambda: KafkaSource("t", max_offsets_per_trigger=0),
     "kafka source t: max_offsets_per_trigger must be a positive whole number or None, not 0"),
    (lambda: KafkaSource("t", max_offsets_per_trigger=True),
     "kafka source t: max_offsets_per_trigger must be a positive whole number or None, not True"),
    (lambda: KafkaSource("t", max_records_per_partition=0),
     "kafka source t: max_records_per_partition must be a positive whole number or None, not 0"),
    (lambda: KafkaSource("t", partitions=0),
     "kafka source t: partitions must be a positive whole number, not 0"),
    (lambda: dataclasses.replace(catalog.load("playback"), silver_max_bytes_per_trigger=0),
     "pipeline playback: silver_max_bytes_per_trigger must be a positive whole number, not 0"),
])
def test_a_bound_that_is_not_a_positive_whole_number_is_refused(make, message: str) -> None:
    with pytest.raises(CatalogError) as caught:
        make()
    assert str(caught.value) == message


def test_the_defaults_and_the_explicit_opt_out_are_accepted() -> None:
    assert FileSource().max_files_per_trigger is None
    assert KafkaSource("t").max_offsets_per_trigger == 500_000
    assert KafkaSource("t", max_offsets_per_trigger=None).max_offsets_per_trigger is None
    assert KafkaSource("t").max_records_per_partition is None
    assert KafkaSource("t", max_records_per_partition=50_000).max_records_per_partition == 50_000
    assert catalog.load("playback").silver_max_bytes_per_trigger == 64 << 20


def test_a_bad_bound_in_an_entry_names_the_entry_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    derived_entry(tmp_path, "zero", source='KafkaSource("events", max_offsets_per_trigger=0)')
    monkeypatch.setenv("WEIR_CONF", str(tmp_path))
    with pytest.raises(CatalogError) as caught:
        catalog.load("zero")
    entry = tmp_path / "pipelines" / "zero.py"
    assert str(caught.value) == (f"{entry}: kafka source events: max_offsets_per_trigger must be a "
                                 "positive whole number or None, not 0")


@pytest.mark.parametrize(("field", "value"), [
    ("trigger_interval", "5"), ("trigger_interval", "0 seconds"), ("trigger_interval", None),
    ("derived_trigger_interval", "soon"), ("derived_trigger_interval", "10 parsecs"),
    ("derived_trigger_interval", "-1 minute"),
])
def test_a_trigger_that_is_not_an_interval_is_refused_when_the_entry_loads(field: str, value) -> None:
    with pytest.raises(CatalogError) as caught:
        dataclasses.replace(catalog.load("playback"), **{field: value})
    assert str(caught.value) == (f"pipeline playback: {field}: {value!r} is not an interval such as "
                                 "'5 seconds' or '1 minute'")


def test_gold_and_the_sessions_run_on_the_derived_trigger_and_default_to_the_ingests() -> None:
    playback = catalog.load("playback")
    assert [playback.trigger_of(q) for q in ("ingest", "gold", "sessions")] == [
        "5 seconds", "10 seconds", "10 seconds"]
    unset = dataclasses.replace(playback, trigger_interval="1 second", derived_trigger_interval=None)
    assert {unset.trigger_of(q) for q in ("ingest", "gold", "sessions")} == {"1 second"}
    assert catalog.interval_ms("1.5 minutes") == 90_000 and catalog.interval_ms("1 day") == 86_400_000
    # a watermark may be zero (no lateness allowed); a trigger may be shorter than a second
    assert catalog.interval_ms("0 seconds") == 0 and catalog.interval_ms("500 milliseconds") == 500
    fast = dataclasses.replace(playback, trigger_interval="500 milliseconds")
    assert (fast.trigger_of("ingest"), fast.trigger_of("gold")) == ("500 milliseconds", "10 seconds")
