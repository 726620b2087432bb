"""The benchmark harness: its one worker protocol (one process, one JSON result line), the peak
memory of a process tree, a tiny real run end to end, and the report's arithmetic (ratios, goals,
"not measured") on a hand-made document."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import jvm_profile, report
from bench.datasets import Size, make
from bench.process_tree import PeakMemory
from spark_jobs.home import REPO_ROOT


def document(results: dict, selected: list[str]) -> dict:
    return {
        "started_at": "2026-11-20T00:00:00+00:00", "wall_s": 1.0, "command": "python -m bench.run",
        "quick": True, "selected": selected, "results": results,
        "environment": {"host_cores": 2, "load_average": [0.5, 0, 0], "load_average_after": [0.5, 0, 0],
                        "git_commit": "abc"},
        "datasets": {"x1": {"files": 1, "lines": 1000, "valid_events": 900, "bytes": 10},
                     "x4": {"files": 1, "lines": 4000, "valid_events": 3600, "bytes": 40}},
    }


def test_ratios_and_goals_come_only_from_numbers_of_the_same_run(tmp_path: Path) -> None:
    doc = document({
        "ceiling": {"workload": "ceiling", "lines": 1000, "events_per_s": 1000.0},
        "bare": {"workload": "bare", "lines": 1000, "events_per_s": 500.0, "cpu_s": 20.0,
                 "span_from_epoch": 100.0, "span_to_epoch": 102.0,
                 "cpu_timeline": [[99.0, 10.0], [101.0, 14.0], [103.0, 18.0]],
                 "timeline": [[1.0, 500], [2.0, 1000]],
                 "time_split_ms": {"triggerExecution": 2000, "addBatch": 1500}},
        "floor": {"workload": "floor", "lines": 1000, "events_per_s": 400.0},
        "platform": {"workload": "platform", "lines": 1000, "events_per_s": 260.0, "cpu_s": 70.0,
                     "span_from_epoch": 200.5, "span_to_epoch": 204.5,
                     "query_spans": {"ingest": [200.5, 204.5], "gold": [204.5, 205.0]},
                     "cpu_timeline": [[200.0, 20.0], [201.0, 22.0], [205.0, 46.0]],
                     "gold_events_per_s": 150.0, "timeline": [[1.5, 500], [2.5, 1000]],
                     "silver": {"count": 900, "distinct": 900, "expected": 900, "exactly_once": True},
                     "time_split_ms": {"ingest": {"triggerExecution": 3000, "addBatch": 2500}}},
        "bare_steady": {"workload": "bare_steady", "lines": 1000, "events_per_s": 400.0,
                        "lag_after_last_file_s": 1.0, "timeline": [[1.0, 1000]]},
        "platform_steady": {"workload": "platform_steady", "lines": 1000, "events_per_s": 200.0,
                            "lag_after_last_file_s": 6.0, "timeline": [[3.0, 1000]]},
        "bare_x4": {"workload": "bare", "lines": 4000, "events_per_s": 800.0},
        "platform_x4": {"workload": "platform", "lines": 4000, "events_per_s": 300.0,
                        "gold_events_per_s": 200.0, "cpu_s": 95.0,
                        "memory": {"jvm_peak_rss_mb": 700.0, "tree_peak_rss_mb": 900.0}},
        "backfill": {"workload": "backfill", "events_per_s": 375.0},
        "latency": {"rate": 130.0, "p50_s": 1.2, "p99_s": 3.5, "after_start_p99_s": 6.5,
                    "runs": [{"latency_sample_s": [1.0, 1.2, 3.5]}]},
        "recovery": {"not_measured": "worker exited 1 (log: x)"},
    }, ["ceiling", "bare", "platform", "steady", "scale", "latency", "backfill", "recovery"])
    doc["summary"] = summary = report.summarise(doc)
    by_name = {g["goal"]: g for g in summary["goals"]}
    ratios = summary["ratios"]
    assert ratios["platform_silver_vs_bare"] == pytest.approx(0.52)
    assert ratios["platform_gold_vs_bare"] == pytest.approx(0.30)
    assert ratios["floor_vs_bare"] == pytest.approx(0.8)
    assert ratios["platform_silver_vs_floor"] == pytest.approx(0.65)
    assert ratios["steady_platform_vs_bare"] == pytest.approx(0.5)
    assert ratios["x4_platform_silver_vs_bare"] == pytest.approx(0.375)
    assert ratios["x4_platform_gold_vs_bare"] == pytest.approx(0.25)
    assert ratios["backfill_vs_stream_gold"] == pytest.approx(2.5)
    assert ratios["platform_cpu_vs_bare"] == pytest.approx(3.5)
    # within the measured spans, interpolated between samples: bare 102 → 16.0 minus 100 → 12.0;
    # platform 204.5 → 43.0 minus 200.5 → 21.0
    assert ratios["platform_ingest_cpu_vs_bare"] == pytest.approx(22.0 / 4.0)
    assert summary["cpu_by_query"] == [
        {"run": "platform", "query": "ingest", "span_s": 4.0, "cpu_s": 22.0},
        {"run": "platform", "query": "gold", "span_s": 0.5, "cpu_s": 3.0}]
    assert ratios["kafka_platform_cpu_vs_bare"] is None        # not run
    assert by_name["platform vs bare job, landing → silver (backlog)"]["reached"] is True
    assert by_name["platform vs bare job, landing → gold (backlog)"]["reached"] is False    # 0.30x
    assert by_name["p99 latency at half load, 1 s trigger, deployed driver"]["reached"] is False
    assert summary["metrics"]["latency_after_start_p99_s"] == 6.5   # beside the goal, not in it
    recovery = by_name["recovery: kill -9 → first committed batch of the successor"]
    assert recovery["reached"] is None and "worker exited 1" in recovery["why_not_measured"]
    dq = by_name["DQ validation cost vs the stream's own processing"]
    assert dq["value"] is None and dq["why_not_measured"] == "not selected in this run"
    kafka = by_name["platform vs bare job, Kafka → silver (backlog, same records)"]
    assert kafka["value"] is None and kafka["why_not_measured"] == "not selected in this run"
    one_file = by_name["one landing file, default driver memory: ingested exactly once"]
    assert one_file["value"] is None and one_file["why_not_measured"] == "not selected in this run"
    [growth] = [g for name, g in by_name.items() if name.startswith("a micro-batch's cost as silver grows")]
    assert growth["value"] is None and growth["why_not_measured"] == "not selected in this run"
    [history] = [g for name, g in by_name.items() if name.startswith("a day's back-fill as history grows")]
    assert history["value"] is None and history["why_not_measured"] == "no number in its result"
    [backlog] = [g for name, g in by_name.items() if name.startswith("a day's back-fill after a backlog")]
    assert backlog["value"] is None and backlog["why_not_measured"] == "not selected in this run"
    assert len(summary["goals"]) == 12
    assert {(r["job"], r["lines"]) for r in summary["scaling"]} >= {
        ("platform → silver", 1000), ("platform → silver", 4000), ("platform → gold", 4000)}
    doc["environment"]["git_changed"] = ["bench/run.py", "spark_jobs/backfill.py"]   # not committed
    paths = report.write(doc, tmp_path, stem="day")
    names = {p.name for p in paths}
    assert {"day.json", "day.md", "day-rates.png", "day-throughput.png", "day-steady.png",
            "day-scale.png", "day-latency.png"} <= names
    text = (tmp_path / "day.md").read_text()
    assert "not measured: worker exited 1 (log: x)" in text
    assert "(git abc with uncommitted changes to bench/run.py, spark_jobs/backfill.py)" in text
    assert "| platform → silver | 4000 | 300 |" in text
    assert "| platform | silver | 900 | 900 | 900 | yes |" in text
    assert "| platform_x4 | 700 | 900 | 95.00 | — |" in text     # no span, no timeline
    assert "| platform | gold | 0.50 | 3.00 |" in text
    assert "| platform | ingest | 3.00 | 2.50 |" in text
    assert "| bare | bare | 2.00 | 1.50 |" in text


def test_with_several_pairs_the_landing_goals_take_the_median_of_the_pairs_ratios(tmp_path: Path) -> None:
    def pair(bare: float, silver: float, gold: float) -> dict[str, Any]:
        return {"bare": {"workload": "bare", "lines": 1000, "events_per_s": bare},
                "platform": {"workload": "platform", "lines": 1000, "events_per_s": silver,
                             "gold_events_per_s": gold}}
    runs = [pair(100.0, 45.0, 30.0), pair(120.0, 48.0, 36.0), pair(80.0, 48.0, 40.0)]
    results = {report.pair_label(job, k): result for k, jobs in enumerate(runs, start=1)
               for job, result in jobs.items()}
    doc = document(results, ["bare", "platform"])
    doc["summary"] = summary = report.summarise(doc)
    assert [p["silver_vs_bare"] for p in summary["pairs"]] == pytest.approx([0.45, 0.40, 0.60])
    assert summary["ratios"]["platform_silver_vs_bare"] == pytest.approx(0.45)   # not the mean, 0.483
    assert summary["ratios"]["platform_gold_vs_bare"] == pytest.approx(0.30)     # of 0.30, 0.30, 0.50
    goals = {g["goal"]: g for g in summary["goals"]}
    assert goals["platform vs bare job, landing → silver (backlog)"]["reached"] is False
    report.write(doc, tmp_path, stem="pairs")
    text = (tmp_path / "pairs.md").read_text()
    assert "the ratios above are the median of 3" in text
    assert "| 3 | 80.00 | 48.00 | 40.00 | 0.60x | 0.50x |" in text
    # a pair whose platform run measured nothing is left out of the median
    results["platform_pair3"] = {"label": "platform_pair3", "not_measured": "worker exited 1"}
    assert [p["pair"] for p in report.landing_pairs(document(results, ["bare", "platform"]))] == [1, 2]


@pytest.mark.parametrize(("line_bytes", "silver_once", "reached"), [
    (1_073_741_850, True, True), (500_000_000, True, False), (1_073_741_850, False, False)])
def test_the_one_line_goal_needs_a_long_enough_line_cut_and_the_day_exactly_once(
        tmp_path: Path, line_bytes: int, silver_once: bool, reached: bool) -> None:
    once = {"count": 10, "distinct": 10, "expected": 10, "exactly_once": True}
    run = {"workload": "platform", "lines": 11, "events_per_s": 5.0, "bronze": once,
           "silver": {**once, "exactly_once": silver_once},
           "cut_lines": [{"source": "file:///l/bone_line-line.jsonl#abc", "position": 0, "kept": 4_000_004,
                          "line_bytes": line_bytes}]}
    doc = document({"platform_one_line": run}, ["one_line"])
    doc["summary"] = summary = report.summarise(doc)
    [goal] = [g for g in summary["goals"] if g["goal"].startswith("one line without a break")]
    assert (goal["value"], goal["reached"]) == (round(line_bytes / 1e9, 2), reached)
    report.write(doc, tmp_path, stem="line")
    assert f"| platform_one_line | bone_line-line.jsonl#abc | 0 | 4,000,004 | {line_bytes:,} |" in \
        (tmp_path / "line.md").read_text()
    run["cut_lines"] = []
    [goal] = [g for g in report.summarise(doc)["goals"] if g["goal"].startswith("one line without")]
    assert goal["reached"] is None and goal["why_not_measured"] == "bronze recorded no cut line"


def test_the_ladder_gives_each_step_against_the_floor_and_the_step_before(tmp_path: Path) -> None:
    doc = document({
        "floor": {"workload": "ladder", "step": 0, "what": "floor", "lines": 1000,
                  "events_per_s": 800.0, "batch_s": [1.0, 0.5]},
        "ladder_2": {"workload": "ladder", "step": 2, "what": "+ cache", "lines": 1000,
                     "events_per_s": 400.0, "batch_s": [2.0, 1.0]},
        "ladder_1": {"workload": "ladder", "step": 1, "what": "+ parse", "lines": 1000,
                     "events_per_s": 500.0, "batch_s": [1.5, 0.75]},
        "ladder_3": {"workload": "ladder", "step": 3, "not_measured": "worker exited 1 (log: x)"},
        "platform": {"workload": "platform", "lines": 1000, "events_per_s": 200.0},
    }, ["floor", "ladder", "platform"])
    doc["summary"] = summary = report.summarise(doc)
    rows = summary["ladder"]
    assert [(r["run"], r["step"]) for r in rows] == [("floor", 0), ("ladder_1", 1), ("ladder_2", 2),
                                                     ("platform", None)]
    assert [r["vs_floor"] for r in rows] == pytest.approx([1.0, 0.625, 0.5, 0.25])
    assert rows[0]["vs_step_before"] is None
    assert [r["vs_step_before"] for r in rows[1:]] == pytest.approx([0.625, 0.8, 0.5])
    written = {p.name for p in report.write(doc, tmp_path, stem="day")}
    assert "day-ladder.png" in written
    assert "| 2 | ladder_2 | + cache | 400 | 2.0, 1.0 | 0.50x | 0.80x |" in (tmp_path / "day.md").read_text()


def test_the_latency_record_keeps_an_evenly_spaced_sample_with_the_extremes() -> None:
    from bench.workloads import evenly_spaced

    ordered = [i / 10 for i in range(100_000)]
    sample = evenly_spaced(ordered, 2001)
    assert len(sample) == 2001 and sample[0] == 0.0 and sample[-1] == ordered[-1]
    assert sample == sorted(sample) and sample[1000] == ordered[50_000]     # the median stays
    assert evenly_spaced([3.0, 4.0], 2001) == [3.0, 4.0]


def test_one_file_dataset_is_the_generated_lines_joined_into_one_landing_file(tmp_path: Path) -> None:
    size = Size(files=3, sessions_per_file=2)
    files = make(tmp_path / "files", "x", size, seed=5)
    one = make(tmp_path / "one", "x", size, seed=5, one_file=True)
    [joined] = list(Path(one.path).iterdir())     # nothing else left: no parts, no temporary
    parts = sorted(Path(files.path).iterdir())
    assert joined.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert (one.files, one.lines, one.valid_events, one.bytes) == (
        1, files.lines, files.valid_events, files.bytes)
    assert joined.read_bytes().count(b"\n") == one.lines


def test_the_ingest_profile_times_one_batch_of_the_catalogs_byte_bound(tmp_path: Path) -> None:
    from bench.workloads import one_batch_of_files, playback
    from spark_jobs.catalog import FileSource

    data = make(tmp_path, "x", Size(files=5, sessions_per_file=2), seed=5)
    files = sorted(Path(data.path).iterdir())
    first_two = files[0].stat().st_size + files[1].stat().st_size
    pipeline = dataclasses.replace(playback(), source=FileSource(max_bytes_per_trigger=first_two))
    assert one_batch_of_files(data, pipeline) == files[:2]
    tiny = dataclasses.replace(pipeline, source=FileSource(max_bytes_per_trigger=1))
    assert one_batch_of_files(data, tiny) == files[:1]     # a file larger than the bound: alone


def growth_point(silver_rows: int, small_s: list[float], large_s: list[float]) -> dict[str, Any]:
    def runs(lines: int, seconds: list[float]) -> list[dict[str, Any]]:
        return [{"lines": lines, "seconds": s, "steps_s": {"silver": s / 2}, "silver_files_read": 3}
                for s in seconds]
    return {"silver_rows": silver_rows, "silver_files": 3, "small": runs(50, small_s),
            "large": runs(500, large_s)}


@pytest.mark.parametrize(("small_at_10m", "large_at_10m", "value", "reached"), [
    ([2.1, 2.0, 2.3], [10.5, 10.6], 10.55 / 10.5, True),
    ([2.9, 3.0, 3.1], [10.5, 10.6], 3.0 / 2.1, False),       # the small batch grew
    ([2.1, 2.0, 2.3], [12.0, 12.5], 12.25 / 10.5, False)])   # the large one did
def test_the_growth_goal_takes_the_worse_of_a_small_and_a_large_batchs_median_growth(
        tmp_path: Path, small_at_10m: list[float], large_at_10m: list[float], value: float,
        reached: bool) -> None:
    doc = document({"silver_growth": {"workload": "silver_growth", "runs": [], "points": [
        growth_point(1_000_000, [2.0, 9.0, 2.1], [10.0, 11.0]),     # a slow run: the median holds
        growth_point(10_000_000, small_at_10m, large_at_10m)]}}, ["growth"])
    doc["summary"] = s = report.summarise(doc)
    [goal] = [g for g in s["goals"] if g["goal"].startswith("a micro-batch's cost as silver grows")]
    assert goal["value"] == pytest.approx(value)
    assert goal["reached"] is reached
    assert [(r["silver_rows"], r["small"]["seconds"], r["large"]["silver_s"]) for r in s["growth"]] == [
        (1_000_000, 2.1, 5.25),
        (10_000_000, statistics.median(small_at_10m), statistics.median(large_at_10m) / 2)]
    report.write(doc, tmp_path, stem="g")
    assert "| 10,000,000 | 3 |" in (tmp_path / "g.md").read_text()
    assert (tmp_path / "g-growth.png").is_file()


def test_the_growth_run_reports_each_sizes_rebuild_of_gold_and_the_sessions(tmp_path: Path) -> None:
    points = [growth_point(rows, [2.0], [10.0]) for rows in (1_000_000, 10_000_000)]
    for point, seconds, heap in zip(points, (20.0, 180.0), (700, 720), strict=True):
        point["rebuild"] = {"silver_rows": point["silver_rows"] + 1_300_000, "seconds": seconds,
                            "gc_s": 1.5, "old_generation_peak_mb": heap, "gold_rows": 40_000,
                            "session_rows": 90_000}
    doc = document({"silver_growth": {"workload": "silver_growth", "runs": [], "points": points,
                                      "driver_heap_mb": 1024}}, ["growth"])
    doc["summary"] = report.summarise(doc)
    report.write(doc, tmp_path, stem="r")
    text = (tmp_path / "r.md").read_text()
    assert "| 2,300,000 | 20.00 | 115,000 | 700 | 1.50 | 40,000 | 90,000 |" in text
    assert "| 11,300,000 | 180 | 62,778 | 720 | 1.50 | 40,000 | 90,000 |" in text
    assert "at most 1024 MB" in text


def test_the_growth_goal_is_not_measured_without_two_sizes_of_silver() -> None:
    doc = document({"silver_growth": {"workload": "silver_growth", "runs": [],
                                      "points": [growth_point(1_000_000, [2.0], [10.0])]}}, ["growth"])
    [goal] = [g for g in report.summarise(doc)["goals"] if g["goal"].startswith("a micro-batch's cost")]
    assert goal["reached"] is None and goal["why_not_measured"] == "fewer than two sizes of silver measured"


def history_point(days: int, seconds: float) -> dict[str, Any]:
    return {"days": days, "bronze_rows": days * 1000, "silver_rows": days * 900, "lines_read": 1000,
            "seconds": seconds, "rerun_seconds": seconds * 0.7, "steps": {"read+parse": 1.0, "silver": 2.0},
            "rerun_steps": {"read+parse": 1.0, "silver": 1.5}, "rerun_changed": False}


@pytest.mark.parametrize(("at_30_days", "reached"), [(55.0, True), (66.0, False)])
def test_the_history_goal_is_a_days_backfill_among_the_most_days_against_the_fewest(
        tmp_path: Path, at_30_days: float, reached: bool) -> None:
    doc = document({"backfill": {"workload": "backfill", "events_per_s": 375.0, "steps": {"silver": 2.0},
                                 "growth": [history_point(1, 50.0), history_point(10, 52.0),
                                            history_point(30, at_30_days)]}}, ["backfill"])
    doc["summary"] = s = report.summarise(doc)
    [goal] = [g for g in s["goals"] if g["goal"] == "a day's back-fill as history grows (1 → 30 days)"]
    assert goal["value"] == pytest.approx(at_30_days / 50.0)
    assert goal["reached"] is reached
    report.write(doc, tmp_path, stem="h")
    assert f"| 30 | 30000 | 27000 | 1000 | {at_30_days:.2f} | 1.00 | 2.00 | {at_30_days * 0.7:.2f} | — |" in (
        tmp_path / "h.md").read_text()


def test_the_backlog_day_goal_is_the_bronze_a_days_backfill_reads_against_the_days_lines() -> None:
    read = {"files": 3, "lines": 110, "bronze_files": 30, "bronze_lines": 1000, "day_lines": 100}
    run = {"workload": "platform", "events_per_s": 5.0, "day_read": read}
    doc = document({"platform_days": run}, ["days"])
    doc["datasets"]["days"] = {"files": 20, "lines": 1000, "valid_events": 900, "bytes": 10, "days": 10}
    [goal] = [g for g in report.summarise(doc)["goals"] if "backlog of 10 days" in g["goal"]]
    assert (goal["value"], goal["reached"]) == (1.1, True)
    read["lines"] = 1000
    [goal] = [g for g in report.summarise(doc)["goals"] if "backlog of 10 days" in g["goal"]]
    assert (goal["value"], goal["reached"]) == (10.0, False)


@pytest.mark.parametrize(("exact", "gigabytes", "reached"), [
    (True, 2.2, True), (False, 2.2, False), (True, 0.5, False)])
def test_the_one_file_goal_needs_a_large_enough_file_ingested_exactly_once(
        exact: bool, gigabytes: float, reached: bool) -> None:
    check = {"count": 9, "distinct": 9, "expected": 9 if exact else 10, "exactly_once": exact}
    doc = document({"bare_one_file": {"lines": 10, "events_per_s": 100.0},
                    "platform_one_file": {"lines": 10, "events_per_s": 40.0, "gold_events_per_s": 30.0,
                                          "bronze": {**check, "exactly_once": True}, "silver": check}},
                   ["one_file"])
    doc["datasets"]["one_file"] = {"files": 1, "lines": 10, "valid_events": 9, "bytes": gigabytes * 1e9}
    summary = report.summarise(doc)
    goal = {g["goal"]: g for g in summary["goals"]}["one landing file, default driver memory: ingested "
                                                    "exactly once"]
    assert (goal["value"], goal["reached"]) == (gigabytes, reached)
    assert summary["ratios"]["one_file_platform_silver_vs_bare"] == pytest.approx(0.4)
    assert summary["ratios"]["one_file_platform_gold_vs_bare"] == pytest.approx(0.3)
    failed = document({"platform_one_file": {"not_measured": "worker exited 1 (log: y)"}}, ["one_file"])
    goal = {g["goal"]: g for g in report.summarise(failed)["goals"]}[goal["goal"]]
    assert goal["reached"] is None and "worker exited 1" in goal["why_not_measured"]


@pytest.mark.parametrize(("before", "after", "loaded"), [
    (0.5, 9.0, False),   # the harness's own workers raised the load: not a loaded machine
    (3.1, 0.2, True),    # busy when the run started: loaded, whatever came after
])
def test_loaded_is_judged_on_the_load_average_before_the_run(
        tmp_path: Path, before: float, after: float, loaded: bool) -> None:
    doc = document({"ceiling": {"workload": "ceiling", "events_per_s": 1000.0}}, ["ceiling"])
    doc["environment"].update(load_average=[before, 0, 0], load_average_after=[after, 0, 0],
                              load_average_between_workers=[
                                  {"before": "ceiling", "at_s": 1.0, "load_average": [after, 0, 0]}])
    doc["summary"] = summary = report.summarise(doc)
    assert summary["load"]["loaded"] is loaded
    assert summary["load"]["judged_on"] == "1-minute load average before the run"
    text = report.markdown_summary(doc)
    assert f"load average {before:.2f} before the run (what \"loaded\" is judged on)" in text
    assert "include the harness's own workers" in text
    assert ("**The machine was loaded when this run started" in text) is loaded


def test_the_kafka_runs_give_the_platform_to_bare_ratio_and_its_goal() -> None:
    doc = document({"bare_kafka": {"events_per_s": 1000.0},
                    "platform_kafka": {"events_per_s": 400.0, "gold_events_per_s": 300.0}},
                   ["kafka"])
    doc["summary"] = summary = report.summarise(doc)
    assert summary["ratios"]["kafka_platform_silver_vs_bare"] == pytest.approx(0.4)
    assert summary["ratios"]["kafka_platform_gold_vs_bare"] == pytest.approx(0.3)
    [kafka_goal] = [g for g in summary["goals"] if "Kafka" in g["goal"]]
    assert kafka_goal["value"] == pytest.approx(0.4) and kafka_goal["reached"] is False
    assert "| kafka_platform_silver_vs_bare | 0.40x |" in report.markdown_summary(doc)


def test_peak_memory_and_cpu_time_are_those_of_the_whole_process_tree() -> None:
    """A child that holds 300 MB and computes for 2 s under a parent that holds and computes
    little: the tree's peak and CPU time count it."""
    child = ("x = bytearray(300 << 20); import time; t = time.process_time()\n"
             "while time.process_time() - t < 2: pass\ntime.sleep(1)")
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"])
    sampler = PeakMemory(parent.pid, every_s=0.1).start()
    parent.wait(timeout=60)
    peaks = sampler.stop()
    assert peaks["tree_peak_rss_mb"] >= 300, peaks
    assert peaks["jvm_peak_rss_mb"] is None             # no JVM in this tree
    assert 1.8 <= peaks["tree_cpu_s"] <= 6, peaks
    timeline = peaks["cpu_timeline"]
    assert [c for _, c in timeline] == sorted(c for _, c in timeline)      # CPU used so far
    assert timeline[-1][1] == pytest.approx(peaks["tree_cpu_s"], abs=0.1)
    assert report.cpu_in_span({"cpu_timeline": timeline, "span_from_epoch": timeline[0][0],
                               "span_to_epoch": timeline[-1][0]}) >= 1.8


def worker(workload: str, args: dict) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = subprocess.run([sys.executable, "-m", "bench.worker", workload, json.dumps(args)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 1, (done.stdout, done.stderr[-2000:])
    return done, json.loads(lines[0])


def test_a_failed_run_prints_its_error_as_its_one_result_line(tmp_path: Path) -> None:
    missing = {"name": "x1", "path": str(tmp_path / "absent"), "files": 1, "lines": 10,
               "valid_events": 9, "bytes": 100}
    _, result = worker("platform", {"workload": "platform", "label": "platform", "dataset": missing,
                                    "workdir": str(tmp_path / "homes")})
    assert result["label"] == "platform" and result["error"].startswith("FileNotFoundError")
    assert "events_per_s" not in result


def test_dag_parse_runs_through_the_worker_protocol() -> None:
    _, result = worker("dag_parse", {"label": "dag_parse", "repeats": 1})
    assert result["label"] == "dag_parse" and result["files"], result
    assert all("seconds" in f for f in result["files"].values()), result


@pytest.mark.slow
def test_quick_run_measures_the_ceiling_and_the_floor_and_writes_its_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--budget-s", "600", "--only", "ceiling",
         "--only", "floor", "--only", "dag_parse",
         "--out", str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = list(tmp_path.glob("*.json"))
    doc = json.loads(record.read_text())
    ceiling = doc["results"]["ceiling"]
    assert ceiling["events_per_s"] > 0 and ceiling["lines"] == doc["datasets"]["x1"]["lines"]
    assert ceiling["memory"]["jvm_peak_rss_mb"] > 0 and ceiling["cpu_s"] > 1   # a JVM ran: seconds of CPU
    floor = doc["results"]["floor"]
    assert floor["events_per_s"] > 0 and floor["rows"]["exactly_once"] and floor["bronze"]["exactly_once"]
    assert floor["rows"]["count"] == floor["bronze"]["count"] == doc["datasets"]["x1"]["lines"]
    assert doc["results"]["dag_parse"]["files"]
    assert doc["summary"]["goals"][0]["why_not_measured"] == "not selected in this run"
    assert (tmp_path / record.name.replace(".json", ".md")).read_text().startswith("# Weir benchmark")
    assert not list(tmp_path.glob("tmp/run-*/homes")), "measurement homes are removed after the run"
    assert list(tmp_path.glob("tmp/run-*/worker-*.log")), "worker logs are kept"
    assert (tmp_path / f"{record.stem}-rates.png").is_file()


@pytest.mark.slow
@pytest.mark.kafka
def test_kafka_run_measures_the_bare_job_and_the_platform_on_the_same_records(tmp_path: Path) -> None:
    """`python -m bench.run --quick --only kafka`: one broker holds the dataset's lines; the bare
    Kafka job and `weir run playback_kafka --once` each read every record once (the platform's
    silver: count == distinct == valid events), the ratio of their rates is in the summary, and
    the broker is stopped and its data removed afterwards."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--budget-s", "900", "--only", "kafka",
         "--out", str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = list(tmp_path.glob("*.json"))
    doc = json.loads(record.read_text())
    lines, valid = doc["datasets"]["x1"]["lines"], doc["datasets"]["x1"]["valid_events"]
    bare, platform = doc["results"]["bare_kafka"], doc["results"]["platform_kafka"]
    assert "not_measured" not in bare and "not_measured" not in platform, (bare, platform)
    assert bare["kafka"]["produce"]["records"] == lines
    assert bare["rows"] == {"count": lines, "distinct": lines, "expected": lines, "exactly_once": True}
    assert platform["silver"] == {"count": valid, "distinct": valid, "expected": valid, "exactly_once": True}
    assert platform["bronze"]["count"] == lines
    assert doc["summary"]["ratios"]["kafka_platform_silver_vs_bare"] == pytest.approx(
        platform["events_per_s"] / bare["events_per_s"])
    assert not list(tmp_path.glob("tmp/run-*/kafka")), "the broker's data is removed"
    brokers = subprocess.run(["pgrep", "-f", f"kafka.Kafka {tmp_path}"], capture_output=True, text=True)
    assert not brokers.stdout.strip(), f"a broker of this run is still up: {brokers.stdout}"


@pytest.mark.slow
def test_platform_run_is_weir_run_once_with_its_output_checked(tmp_path: Path, capsys) -> None:
    """`python -m bench.worker platform`: `weir run playback --once` in its own driver on a few
    hundred lines of two days; silver and gold rates from its progress, silver and bronze exactly
    once, and what a back-fill of one of the days would read of bronze: that day's lines only. The
    driver is recorded as `--jvm-profile` asks, and its samples filed by the work they are part of."""
    data = make(tmp_path / "data", "days", Size(files=2, sessions_per_file=6), seed=11, days=2)
    _, result = worker("platform", {"workload": "platform", "label": "platform",
                                    "dataset": dataclasses.asdict(data), "workdir": str(tmp_path / "homes"),
                                    "params": {"jvm_profile": str(tmp_path / "jfr")}})
    assert "error" not in result, result
    assert result["silver"] == {"count": data.valid_events, "distinct": data.valid_events,
                                "expected": data.valid_events, "exactly_once": True}
    assert result["bronze"]["count"] == result["bronze"]["expected"] == data.lines
    assert 0 < result["gold_events_per_s"] <= result["events_per_s"]
    assert result["batches"] >= 1 and result["time_split_ms"]["ingest"]["addBatch"] > 0
    read = result["day_read"]
    assert read["bronze_lines"] == data.lines and 0 < read["day_lines"] == read["lines"] < data.lines, read
    assert read["files"] < read["bronze_files"], read
    # the queries ran one after another, each span ending where the next begins
    spans = result["query_spans"]
    assert list(spans) == ["ingest", "gold", "sessions"]
    bounds = [t for span in spans.values() for t in span]
    assert bounds == sorted(bounds) and spans["ingest"][1] == spans["gold"][0], spans
    log = (tmp_path / "driver-platform-0.log").read_text(errors="replace")
    # the progress listener is drained and removed before the driver exits: Spark logged an ERROR
    # ("Listener PythonStreamingQueryListenerWrapper threw an exception") at every `--once` exit
    assert "StreamingQueryListenerBus" not in log, log[-2000:]
    # and every query's last batch is in the driver's progress (the gold query has one batch here)
    assert result["gold_batches"] >= 1
    profile = result["jvm_profile"]
    work = {w["work"]: w["samples"] for w in profile["work"]}
    assert profile["samples"] == sum(work.values()) > 100, work
    tasks = ("parse into the batch's cache", "Parquet write (Delta)", "shuffle write", "other tasks")
    driver = ("driver: Delta's log and commits", "driver: calls from Python")
    assert any(work.get(w) for w in tasks) and any(work.get(w) for w in driver), work
    assert profile["jit_compile_s"] > 0 and profile["jit_compiles"] > 0, profile
    recording = jvm_profile.only_recording(tmp_path / "jfr" / "platform-0")
    assert jvm_profile.main([str(recording)]) == 0
    assert f"{profile['samples']:,} samples" in capsys.readouterr().out
    assert jvm_profile.main([str(tmp_path / "none.jfr")]) == 2
    assert capsys.readouterr().err.strip() == "usage: python -m bench.jvm_profile RECORDING.jfr"


def test_a_recordings_durations_are_read_in_every_iso_8601_form_jfr_prints() -> None:
    """JFR prints a compile time of 87.7 s as `PT1M27.676S`: a run's summary once failed on it."""
    seconds = {"PT58.8S": 58.8, "PT1M27.676S": 87.676, "PT2H": 7200.0, "PT1H0M3S": 3603.0, "PT0S": 0.0}
    assert {text: jvm_profile._seconds(text) for text in seconds} == seconds
    with pytest.raises(ValueError, match="not an ISO-8601 duration"):
        jvm_profile._seconds("87.7 s")
