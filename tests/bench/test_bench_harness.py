"""The benchmark harness: a tiny real run end to end (one JVM, one workload, the DAG parse), and
the report's arithmetic (ratios, goals, "not measured") on a hand-made document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import contributed, report
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
        "ceiling": {"workload": "ceiling", "events_per_s": 1000.0},
        "bare": {"workload": "bare", "dataset": "x1", "lines": 1000, "events_per_s": 400.0,
                 "sustained_events_per_s": 500.0, "master": "local[2]",
                 "runs": [{"timeline": [[1.0, 500], [2.0, 1000]]}]},
        "platform_silver": {"workload": "platform_silver", "dataset": "x1", "lines": 1000,
                            "sustained_events_per_s": 460.0, "master": "local[2]",
                            "runs": [{"timeline": [[1.5, 500], [2.5, 1000]]}]},
        "scale_platform_x4": {"workload": "platform_silver", "dataset": "x4", "lines": 4000,
                              "sustained_events_per_s": 900.0, "master": "local[2]"},
        "platform_gold": {"workload": "platform_gold", "events_per_s": 100.0},
        "backfill": {"workload": "backfill", "events_per_s": 250.0, "runs": [{"rerun_seconds": 2.0}]},
        "latency": {"rate": 230.0, "p50_s": 1.2, "p99_s": 3.5, "latencies_s": [1.0, 1.2, 3.5]},
        "recovery": {"not_measured": "bench/recovery.py is not in the checkout yet"},
    }, ["ceiling", "bare", "platform_silver", "platform_gold", "latency", "backfill", "scaling",
        "recovery"])
    doc["summary"] = summary = report.summarise(doc)
    by_name = {g["goal"]: g for g in summary["goals"]}
    assert summary["ratios"]["platform_silver_vs_bare"] == pytest.approx(0.92)
    assert by_name["platform vs bare Spark throughput (landing → silver)"]["reached"] is True
    assert by_name["platform vs Spark's ceiling"]["reached"] is False          # 0.46x
    assert by_name["p99 latency at half load, 1 s trigger"]["reached"] is False
    assert by_name["back-fill vs streaming rate (landing → gold)"]["value"] == pytest.approx(2.5)
    recovery = by_name["recovery: kill -9 → first committed batch of the successor"]
    assert recovery["reached"] is None and "not in the checkout" in recovery["why_not_measured"]
    dq = by_name["DQ validation cost vs the stream's own processing"]
    assert dq["value"] is None and dq["why_not_measured"] == "not selected in this run"
    assert len(summary["goals"]) == 6
    paths = report.write(doc, tmp_path, stem="day")
    names = {p.name for p in paths}
    assert {"day.json", "day.md", "day-throughput.png", "day-latency.png", "day-scaling.png"} <= names
    text = (tmp_path / "day.md").read_text()
    assert "not measured: bench/recovery.py is not in the checkout yet" in text
    assert "| platform | local[2] | 4000 | 4.00 |" in text


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


def test_kafka_and_landing_files_rates_of_the_kafka_run_sit_side_by_side() -> None:
    doc = document({"kafka": {"result": {"events_per_s": 900.0, "landing_files_events_per_s": 1200.0},
                              "events_per_s": 900.0, "wall_s": 80.0, "run_quick": False}}, ["kafka"])
    doc["summary"] = summary = report.summarise(doc)
    assert summary["metrics"]["kafka_events_per_s"] == 900.0
    assert summary["metrics"]["kafka_run_landing_files_events_per_s"] == 1200.0
    assert summary["ratios"]["kafka_vs_landing_files"] == pytest.approx(0.75)
    assert "| Kafka → silver (ingest query, sustained) | 900 ev/s |" in report.markdown_summary(doc)


def test_contributed_results_are_read_under_the_agreed_names() -> None:
    assert contributed.headline("recovery", {"detection_s": 4, "successor_first_commit_s": 31.5}) == {
        "detection_s": 4.0, "first_commit_s": 31.5}
    assert contributed.headline("dq", {"rows": 10, "ratio": 0.2}) == {
        "seconds_per_million_rows": None, "dq_vs_stream": 0.2}
    assert contributed.headline("kafka", {"events_per_s": 812.5, "landing_files_events_per_s": 900}) == {
        "events_per_s": 812.5}


@pytest.mark.slow
def test_quick_run_measures_the_ceiling_and_writes_its_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--budget-s", "600", "--only", "ceiling",
         "--only", "dag_parse",
         "--out", str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = list(tmp_path.glob("*.json"))
    doc = json.loads(record.read_text())
    ceiling = doc["results"]["ceiling"]
    assert ceiling["events_per_s"] > 0 and ceiling["lines"] == doc["datasets"]["x1"]["lines"]
    assert ceiling["memory"]["jvm_peak_rss_mb"] > 0
    assert doc["results"]["ceiling_transforms"]["events_per_s"] > 0
    assert "dag_parse" in doc["results"]
    assert doc["summary"]["goals"][0]["why_not_measured"] == "not selected in this run"
    assert (tmp_path / record.name.replace(".json", ".md")).read_text().startswith("# Weir benchmark")
    assert not list(tmp_path.glob("tmp/run-*/homes")), "measurement homes are removed after the run"
    assert list(tmp_path.glob("tmp/run-*/worker-*.log")), "worker logs are kept"


@pytest.mark.slow
@pytest.mark.kafka
def test_kafka_throughput_quick_through_the_harness_contract(tmp_path: Path) -> None:
    """`measure(quick=True)` in a fresh process, as the suite runs it: both sources exactly once
    on the same data, Kafka's rate as the headline, and its own broker stopped afterwards."""
    done = contributed.run_contributed("kafka", tmp_path, quick=True, timeout_s=600)
    assert "not_measured" not in done, done
    result = done["result"]
    assert done["events_per_s"] == result["events_per_s"] > 0
    assert result["landing_files_events_per_s"] > 0
    assert result["kafka_vs_files"] == pytest.approx(
        result["events_per_s"] / result["landing_files_events_per_s"], rel=0.01)
    lines, valid = result["dataset"]["lines"], result["dataset"]["valid_events"]
    for source in ("kafka", "landing_files"):
        [run] = result[source]["runs"]
        assert run["bronze_rows"] == lines and run["silver_rows"] == run["silver_distinct"] == valid, run
    assert not (tmp_path / "kafka-bench").exists(), "the broker's data and the homes are removed"
    brokers = subprocess.run(["pgrep", "-f", f"kafka.Kafka {tmp_path}"], capture_output=True, text=True)
    assert not brokers.stdout.strip(), f"a broker of this run is still up: {brokers.stdout}"
