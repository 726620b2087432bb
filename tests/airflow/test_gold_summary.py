"""The analyst DAG's summary (`dags/playback_gold_summary.py`): SQL over gold that delta-rs runs, no
JVM. Gold here is written with delta-rs too, so the expected totals are computed from the same rows
in Python: the newest 15 minutes of windows, the dates a back-fill names, a version read as of the
event that named it."""

from __future__ import annotations

import datetime as dt
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.airflow.gold_table import GOLD_SCHEMA

REPO = Path(__file__).resolve().parents[2]
START = dt.datetime(2026, 3, 1, 23, 30, tzinfo=dt.UTC)   # 50 minutes: two dates


@pytest.fixture(scope="module")
def dag_module() -> ModuleType:
    path = REPO / "dags" / "playback_gold_summary.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def windows(first: int, last: int) -> list[dict]:
    """Gold rows of minutes [first, last): three CDNs (one unknown), errors varying by minute."""
    rows = []
    for minute in range(first, last):
        start = START + dt.timedelta(minutes=minute)
        for i, cdn in enumerate(("akamai", "fastly", None)):
            rows.append({"window_start": start, "window_end": start + dt.timedelta(minutes=1),
                         "content_id": f"c{i}", "cdn": cdn, "events": 10 + i, "plays": 2,
                         "errors": (minute + i) % 3 if cdn != "fastly" else 4 * (minute % 2),
                         "rebuffer_ms": 100 * i, "avg_bitrate_kbps": 2500.0, "sessions": 3,
                         "event_date": start.date()})
    return rows


def expected(rows: list[dict], version: int) -> dict:
    events, errors = sum(r["events"] for r in rows), sum(r["errors"] for r in rows)
    by_cdn = Counter()
    for r in rows:
        by_cdn[r["cdn"] or "unknown"] += r["errors"]
    worst = min(by_cdn, key=lambda cdn: (-by_cdn[cdn], cdn)) if errors else None
    return {"version": version, "rows": len(rows), "windows": len({r["window_start"] for r in rows}),
            "from": min(r["window_start"] for r in rows).isoformat() if rows else None,
            "to": max(r["window_end"] for r in rows).isoformat() if rows else None,
            "events": events, "plays": sum(r["plays"] for r in rows), "errors": errors,
            "error_rate": round(errors / events, 4) if events else None,
            "rebuffer_ms": sum(r["rebuffer_ms"] for r in rows), "most_errors_cdn": worst}


@pytest.fixture(scope="module")
def gold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], list[dict]]:
    path = tmp_path_factory.mktemp("gold") / "playback_qoe_1m"
    first, second = windows(0, 30), windows(30, 50)
    for rows in (first, second):   # versions 0 and 1
        write_deltalake(str(path), pa.Table.from_pylist(rows, schema=GOLD_SCHEMA), mode="append",
                        partition_by=["event_date"])
    return path, first, second


def test_a_stream_event_summarises_the_newest_fifteen_minutes(dag_module, gold) -> None:
    path, first, second = gold
    newest = max(r["window_end"] for r in first + second)
    recent = [r for r in first + second if r["window_end"] > newest - dt.timedelta(minutes=15)]
    assert dag_module.summarise(path, None, []) == expected(recent, 1)


def test_an_older_version_is_read_as_the_event_named_it(dag_module, gold) -> None:
    path, first, _ = gold
    newest = max(r["window_end"] for r in first)
    recent = [r for r in first if r["window_end"] > newest - dt.timedelta(minutes=15)]
    assert dag_module.summarise(path, 0, []) == expected(recent, 0)


def test_a_backfill_event_summarises_exactly_its_dates(dag_module, gold) -> None:
    path, first, second = gold
    every = first + second
    second_day = START.date() + dt.timedelta(days=1)
    for dates, rows in (
        ([(str(START.date()), str(START.date()))], [r for r in every if r["event_date"] == START.date()]),
        ([(str(second_day), str(second_day)), ("2026-01-01", "2026-01-31")],
         [r for r in every if r["event_date"] == second_day]),
        ([("2026-01-01", "2026-01-31")], []),
    ):
        assert dag_module.summarise(path, None, dates) == expected(rows, 1), dates


def test_a_date_that_is_not_one_is_refused_not_queried(dag_module, gold) -> None:
    path, _, _ = gold
    with pytest.raises(ValueError):
        dag_module.summarise(path, None, [("2026-03-01' OR 'a'='a", "2026-03-02")])
