"""Turn a suite run into its record: the JSON document, a markdown table, and PNG plots
(rates side by side, throughput over time, the scale curve, a batch as silver grows, latency).
Ratios and goals are computed here, only from numbers measured in the same run; anything missing
reads "not measured: <why>"."""

from __future__ import annotations

import itertools
import json
import logging
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import jvm_profile

log = logging.getLogger(__name__)
Document = dict[str, Any]
# The latency run's latencies in the record: an evenly spaced sample of them, sorted (records
# before 2026-11-25 kept every one, as "latencies_s").
LATENCY_SAMPLE = "latency_sample_s"


def _result(doc: Document, label: str) -> dict[str, Any]:
    value = doc["results"].get(label)
    return value if isinstance(value, dict) else {}


def _why(doc: Document, label: str) -> str:
    """Why `label` has no number: its recorded reason, or that it was not selected."""
    r = _result(doc, label)
    if not r:
        return "not selected in this run" if label not in doc.get("selected", []) else "no result"
    return _short(str(r.get("not_measured") or "no number in its result"))


def _short(text: str, limit: int = 220) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def machine_load(doc: Document) -> dict[str, Any]:
    """Whether the machine was loaded, judged on the 1-minute load average sampled *before* the
    run: the harness's own workers raise the load during the run, so the average after it (and
    between workers) says more about the benchmark than about the machine; those are kept only
    for reference."""
    env = doc.get("environment", {})
    cores = env.get("host_cores") or 1
    before = (env.get("load_average") or [None])[0]
    after = (env.get("load_average_after") or [None])[0]
    between = [s["load_average"][0] for s in env.get("load_average_between_workers") or []]
    return {"cores": cores, "before_1m": before, "after_1m": after,
            "between_workers_max_1m": max(between) if between else None,
            "loaded": before is not None and before > cores,
            "judged_on": "1-minute load average before the run"}


# (label, what it is) of the rate rows, in the order the report shows them.
RATES = (
    ("ceiling", "Spark ceiling: batch read + from_json → noop"),
    ("bare", "bare job: readStream.text → from_json → Delta append (sustained)"),
    ("floor", "two-layer floor: the bare job + bronze (line, file), platform's batch bound (sustained)"),
    ("platform", "platform landing → silver (`weir run --once`, ingest query, sustained)"),
    ("platform:gold", "platform landing → gold (`weir run --once`, first ingest batch → last gold batch)"),
    ("bare_steady", "steady arrival: bare job (first file → last commit)"),
    ("platform_steady", "steady arrival: platform landing → silver (first file → last commit)"),
    ("ceiling_x4", "4x input: Spark ceiling"),
    ("bare_x4", "4x input: bare job"),
    ("platform_x4", "4x input: platform landing → silver"),
    ("platform_x4:gold", "4x input: platform landing → gold"),
    ("bare_kafka", "Kafka backlog: bare job, readStream kafka → from_json → Delta append (sustained)"),
    ("platform_kafka", "Kafka backlog: platform → silver (`weir run playback_kafka --once`, sustained)"),
    ("platform_kafka:gold", "Kafka backlog: platform → gold"),
    ("bare_days", "backlog of several days: bare job"),
    ("platform_days", "backlog of several days: platform landing → silver"),
    ("platform_days:gold", "backlog of several days: platform landing → gold"),
    ("bare_one_file", "one landing file (~2 GB): bare job"),
    ("platform_one_file", "one landing file (~2 GB): platform landing → silver"),
    ("platform_one_file:gold", "one landing file (~2 GB): platform landing → gold"),
    ("ceiling_transforms", "batch read + the platform's parse/silver transforms → noop"),
    ("backfill", "back-fill of one day (bronze → silver + gold)"),
)


def rate(doc: Document, key: str) -> float | None:
    """Events/s of `label` or `label:gold` (the platform's landing → gold rate)."""
    label, _, layer = key.partition(":")
    value = _result(doc, label).get("gold_events_per_s" if layer == "gold" else "events_per_s")
    return float(value) if value else None


def pair_label(job: str, pair: int) -> str:
    """The result label of `job` ("bare" or "platform") in the `pair`th pair of a `--pairs` run."""
    return job if pair == 1 else f"{job}_pair{pair}"


def landing_pairs(doc: Document) -> list[dict[str, Any]]:
    """The landing backlog's pairs (`--pairs`): each the bare job, then the platform right after it,
    and the platform's ratios to that bare job. A pair missing either rate is left out."""
    pairs = []
    for pair in itertools.count(1):
        bare, platform = (pair_label(job, pair) for job in ("bare", "platform"))
        if bare not in doc["results"] and platform not in doc["results"]:
            return pairs
        rates = {job: rate(doc, key) for job, key in (("bare", bare), ("silver", platform),
                                                       ("gold", f"{platform}:gold"))}
        if rates["bare"] and rates["silver"]:
            pairs.append({"pair": pair, **rates, "silver_vs_bare": _ratio(rates["silver"], rates["bare"]),
                          "gold_vs_bare": _ratio(rates["gold"], rates["bare"])})
    return pairs


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(doc: Document) -> dict[str, Any]:
    """Headline rates, ratios (only between runs of this document) and goals. The landing ratios
    are the median of the pairs' (`landing_pairs`): one pair's, unless the run took several."""
    rates = {key: rate(doc, key) for key, _ in RATES}
    latency, recovery = _result(doc, "latency"), _result(doc, "recovery")
    dq = _result(doc, "dq")
    pairs = landing_pairs(doc)
    ratios = {
        "platform_silver_vs_bare": _median(p["silver_vs_bare"] for p in pairs),
        "platform_gold_vs_bare": _median(p["gold_vs_bare"] for p in pairs),
        "bare_vs_ceiling": _ratio(rates["bare"], rates["ceiling"]),
        # what a second table and bounded batches cost, hand-written; the rest of the gap to the
        # platform is its contract check, quarantine, dedupe, enrichment and exactly-once
        "floor_vs_bare": _ratio(rates["floor"], rates["bare"]),
        "platform_silver_vs_floor": _ratio(rates["platform"], rates["floor"]),
        "platform_silver_vs_ceiling": _ratio(rates["platform"], rates["ceiling"]),
        "steady_platform_vs_bare": _ratio(rates["platform_steady"], rates["bare_steady"]),
        "x4_platform_silver_vs_bare": _ratio(rates["platform_x4"], rates["bare_x4"]),
        "x4_platform_gold_vs_bare": _ratio(rates["platform_x4:gold"], rates["bare_x4"]),
        "x4_vs_x1_platform_silver": _ratio(rates["platform_x4"], rates["platform"]),
        "backfill_vs_stream_gold": _ratio(rates["backfill"], rates["platform:gold"]),
        "dq_vs_stream_cost": dq.get("ratio"),
        "kafka_platform_silver_vs_bare": _ratio(rates["platform_kafka"], rates["bare_kafka"]),
        "kafka_platform_gold_vs_bare": _ratio(rates["platform_kafka:gold"], rates["bare_kafka"]),
        "days_platform_silver_vs_bare": _ratio(rates["platform_days"], rates["bare_days"]),
        "days_platform_gold_vs_bare": _ratio(rates["platform_days:gold"], rates["bare_days"]),
        "one_file_platform_silver_vs_bare": _ratio(rates["platform_one_file"], rates["bare_one_file"]),
        "one_file_platform_gold_vs_bare": _ratio(rates["platform_one_file:gold"], rates["bare_one_file"]),
        # the work each does for the same input (CPU seconds of the whole process tree, start-up
        # included): on two cores a gap in work is a gap in rate, whatever the parallelism
        "platform_cpu_vs_bare": _ratio(_result(doc, "platform").get("cpu_s"),
                                       _result(doc, "bare").get("cpu_s")),
        "kafka_platform_cpu_vs_bare": _ratio(_result(doc, "platform_kafka").get("cpu_s"),
                                             _result(doc, "bare_kafka").get("cpu_s")),
        # the same within the measured span only (the platform's ingest query, the bare job's
        # batches): the work of getting the lines into silver, against the bare job's append
        "platform_ingest_cpu_vs_bare": _ratio(cpu_in_span(_result(doc, "platform")),
                                              cpu_in_span(_result(doc, "bare"))),
        "kafka_platform_ingest_cpu_vs_bare": _ratio(cpu_in_span(_result(doc, "platform_kafka")),
                                                    cpu_in_span(_result(doc, "bare_kafka"))),
        "latency_p99_platform_vs_bare": _ratio(latency.get("p99_s"),
                                               _result(doc, "bare_latency").get("p99_s")),
    }
    others = {
        "steady_bare_lag_after_last_file_s": _result(doc, "bare_steady").get("lag_after_last_file_s"),
        "steady_platform_lag_after_last_file_s": _result(doc, "platform_steady").get("lag_after_last_file_s"),
        "latency_rate_events_per_s": latency.get("rate"),
        "latency_p50_s": latency.get("p50_s"),
        "latency_p99_s": latency.get("p99_s"),
        # the bare job at the same rate and trigger: the latency Spark and a Delta append reach here
        "bare_latency_p50_s": _result(doc, "bare_latency").get("p50_s"),
        "bare_latency_p99_s": _result(doc, "bare_latency").get("p99_s"),
        # the lines that landed in the first seconds after the start, while the JIT compiled
        "latency_after_start_p99_s": latency.get("after_start_p99_s"),
        "bare_latency_after_start_p99_s": _result(doc, "bare_latency").get("after_start_p99_s"),
        "recovery_detection_s": recovery.get("detection_s"),
        "recovery_first_commit_s": recovery.get("first_commit_s"),
        "dq_s_per_million_rows": dq.get("seconds_per_million_rows"),
        "dag_parse_max_net_s": _result(doc, "dag_parse").get("max_net_s"),
    }
    memory = {label: {**r["memory"], "cpu_s": r.get("cpu_s"), "span_cpu_s": cpu_in_span(r)}
              for label, r in doc["results"].items()
              if isinstance(r, dict) and isinstance(r.get("memory"), dict)}

    def goal(name: str, target: str, value: float | None, ok: Callable[[float], bool],
             missing: str) -> dict[str, Any]:
        return {"goal": name, "target": target, "value": value,
                "reached": None if value is None else ok(value),
                "why_not_measured": None if value is not None else missing}

    silver = "bare" if rates["platform"] else "platform"
    goals = [
        goal("platform vs bare job, landing → silver (backlog)", ">= 0.5x",
             ratios["platform_silver_vs_bare"], lambda v: v >= 0.5, _why(doc, silver)),
        goal("platform vs bare job, landing → gold (backlog)", ">= 0.33x",
             ratios["platform_gold_vs_bare"], lambda v: v >= 0.33, _why(doc, silver)),
        goal("platform vs bare job, Kafka → silver (backlog, same records)", ">= 0.5x",
             ratios["kafka_platform_silver_vs_bare"], lambda v: v >= 0.5,
             _why(doc, "bare_kafka" if rates["platform_kafka"] else "platform_kafka")),
        goal("p99 latency at half load, 1 s trigger, deployed driver", "<= 3 s", others["latency_p99_s"],
             lambda v: v <= 3.0, _why(doc, "latency")),
        goal("recovery: kill -9 → first committed batch of the successor", "<= 45 s",
             others["recovery_first_commit_s"], lambda v: v <= 45.0, _why(doc, "recovery")),
        goal("back-fill vs streaming rate (landing → gold)", ">= 3x", ratios["backfill_vs_stream_gold"],
             lambda v: v >= 3.0, _why(doc, "backfill" if rates["platform:gold"] else "platform")),
        goal("DQ validation cost vs the stream's own processing", "< 1x", ratios["dq_vs_stream_cost"],
             lambda v: v < 1.0, _why(doc, "dq")),
        one_file_goal(doc),
        one_line_goal(doc),
        growth_goal(doc),
        history_goal(doc),
        backlog_day_goal(doc),
    ]
    return {"rates": rates, "ratios": ratios, "metrics": others, "goals": goals,
            "cpu_by_query": cpu_by_query(doc),
            "scaling": scaling_rows(doc), "ladder": ladder_rows(doc), "growth": growth_rows(doc),
            "pairs": pairs, "memory": memory,
            "load": machine_load(doc)}


def growth_rows(doc: Document) -> list[dict[str, Any]]:
    """The growth run, one row per size of silver: the medians of its small and of its large
    batches (the whole batch, and its silver write)."""
    rows = []
    for point in _result(doc, "silver_growth").get("points") or []:
        row: dict[str, Any] = {"silver_rows": point["silver_rows"], "silver_files": point.get("silver_files")}
        for kind in ("small", "large"):
            runs = point.get(kind) or []
            if runs:
                row[kind] = {"lines": runs[0]["lines"],
                             "seconds": statistics.median(r["seconds"] for r in runs),
                             "silver_s": statistics.median(r["steps_s"].get("silver", 0.0) for r in runs),
                             "silver_files_read": max(r.get("silver_files_read") or 0 for r in runs),
                             "silver_files_hashed": max(r.get("silver_files_hashed") or 0 for r in runs),
                             "silver_hashes_read": statistics.median(r.get("silver_hashes_read") or 0
                                                                     for r in runs)}
        first = point.get("first")
        if first:
            row["first"] = {"seconds": first["seconds"],
                            "silver_hashes_read": first.get("silver_hashes_read")}
        if point.get("rebuild"):
            row["rebuild"] = point["rebuild"]
        rows.append(row)
    return rows


def rebuild_lines(growth: list[dict[str, Any]], heap_mb: float | None) -> list[str]:
    """The growth run's rebuilds of gold and the sessions from the whole of silver at each size."""
    rebuilds = [row["rebuild"] for row in growth if row.get("rebuild")]
    if not rebuilds:
        return []
    lines = ["", "## Gold and the sessions rebuilt from the whole of silver (`rebuild_from_silver`: a "
                 "reset, rewind or refresh of their queries)", "",
             "| silver rows read | seconds | silver rows/s | heap's old generation, peak MB | "
             "GC s | gold rows | session rows |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['silver_rows']:,} | {_fmt(r['seconds'])} | "
              f"{_fmt(_rate(r['silver_rows'], r['seconds']))} | {_fmt(r['old_generation_peak_mb'])} | "
              f"{_fmt(r['gc_s'])} | {r['gold_rows']:,} | {r['session_rows']:,} |" for r in rebuilds]
    if heap_mb:
        lines.append(f"\nThe driver's heap: at most {_fmt(heap_mb)} MB (its default memory).")
    return lines


def _rate(rows: int, seconds: float) -> float | None:
    return rows / seconds if seconds else None


def growth_goal(doc: Document) -> dict[str, Any]:
    """Each batch of the growth run (a running stream's small one, a backlog's large one) at the
    largest silver against the smallest, the worse of the two: issue 11 asks that a batch's cost
    not grow with silver. Within 10 % is the runs' noise: the small batch's medians at one size
    differed by up to 8 % between runs."""
    rows = growth_rows(doc)
    growth: dict[str, float | None] = {}
    for kind in ("small", "large"):
        medians = [r[kind]["seconds"] for r in rows if kind in r]
        if len(medians) > 1:
            growth[kind] = _ratio(medians[-1], medians[0])
    value = max((v for v in growth.values() if v is not None), default=None)
    sizes = f" ({rows[0]['silver_rows']:,} → {rows[-1]['silver_rows']:,} rows)" if len(rows) > 1 else ""
    return {"goal": f"a micro-batch's cost as silver grows{sizes}, the worse of a small and a large batch",
            "target": "<= 1.1x", "value": value, "reached": None if value is None else value <= 1.1,
            "by_batch": growth,
            "why_not_measured": None if value is not None else
            (_why(doc, "silver_growth") if not rows else "fewer than two sizes of silver measured")}


def history_goal(doc: Document) -> dict[str, Any]:
    """A day's back-fill among the most days of history against the same back-fill among the
    fewest (issue 11: one day out of 30 days of bronze costs about one day's work, not thirty).
    Within 1.2x: a cost that grew with history by even 1 % a day would show 1.3x at 30 days."""
    points = [p for p in _result(doc, "backfill").get("growth") or [] if p.get("days")]
    value = _ratio(points[-1]["seconds"], points[0]["seconds"]) if len(points) > 1 else None
    days = f" ({points[0]['days']} → {points[-1]['days']} days)" if len(points) > 1 else ""
    return {"goal": f"a day's back-fill as history grows{days}", "target": "<= 1.2x", "value": value,
            "reached": None if value is None else value <= 1.2,
            "why_not_measured": None if value is not None else
            (_why(doc, "backfill") if not points else "fewer than two sizes of history measured")}


def backlog_day_goal(doc: Document) -> dict[str, Any]:
    """A day's back-fill after a backlog of several days ingested at once (`days`): the bronze
    lines it reads against the day's own (issue 11: one day's work, not all the backlog's). The
    day's back-fill reads the files whose `event_date_hint` statistics can hold it; before the
    stream wrote a date per file, every file of the backlog's batches spanned all its days."""
    run = _result(doc, "platform_days")
    read = run.get("day_read") or {}
    value = _ratio(read.get("lines"), read.get("day_lines"))
    days = doc.get("datasets", {}).get("days", {}).get("days")
    return {"goal": f"a day's back-fill after a backlog of {days or 'several'} days: bronze lines read "
                    "against the day's", "target": "<= 1.2x", "value": value,
            "reached": None if value is None else value <= 1.2, "read": read,
            "why_not_measured": None if value is not None else _why(doc, "platform_days")}


def cpu_at(timeline: list[list[float]], at: float) -> float | None:
    """CPU seconds the run's tree had used by epoch second `at`, interpolated between the two
    samples around it; None outside the sampled time."""
    for (t0, c0), (t1, c1) in itertools.pairwise(timeline):
        if t0 <= at <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (at - t0) / (t1 - t0)
    return None


def cpu_in_span(result: dict[str, Any], span: list[float] | None = None) -> float | None:
    """CPU seconds the run's process tree used within `span` (epoch seconds; default: the run's
    measured span, the sustained rate's first batch start → last batch end), from the harness's
    CPU timeline; None without one."""
    timeline = result.get("cpu_timeline")
    first, last = span or (result.get("span_from_epoch"), result.get("span_to_epoch"))
    if not timeline or first is None or last is None:
        return None
    start, end = cpu_at(timeline, first), cpu_at(timeline, last)
    return None if start is None or end is None else round(end - start, 1)


def cpu_by_query(doc: Document) -> list[dict[str, Any]]:
    """For each `weir run --once` run: each query's span (they run one after another) and the CPU
    seconds the tree used in it."""
    return [{"run": label, "query": query, "span_s": round(span[1] - span[0], 1),
             "cpu_s": cpu_in_span(r, span)}
            for label, r in doc["results"].items() if isinstance(r, dict)
            for query, span in (r.get("query_spans") or {}).items()]


ONE_FILE_GB = 2.0


def one_file_goal(doc: Document) -> dict[str, Any]:
    """Bounded memory whatever one file holds: the platform (default driver memory) ingested one
    landing file of at least `ONE_FILE_GB` GB, bronze and silver exactly once. The value is the
    file's size once the run finished; an output that is not exactly once misses the goal."""
    run = _result(doc, "platform_one_file")
    size = doc.get("datasets", {}).get("one_file", {}).get("bytes")
    finished = bool(run) and not run.get("not_measured") and size is not None
    exact = all((run.get(layer) or {}).get("exactly_once") for layer in ("bronze", "silver"))
    value = round(size / 1e9, 2) if finished else None
    return {"goal": "one landing file, default driver memory: ingested exactly once",
            "target": f">= {ONE_FILE_GB:g} GB", "value": value,
            "reached": None if value is None else value >= ONE_FILE_GB and exact,
            "why_not_measured": None if value is not None else _why(doc, "platform_one_file")}


ONE_LINE_GB = 1.0


def one_line_goal(doc: Document) -> dict[str, Any]:
    """Bounded memory whatever one line holds: the platform (default driver memory) ingested the
    day beside a file of one line of at least `ONE_LINE_GB` GB without a break, bronze and silver
    exactly once, bronze keeping that line's first bytes and its length. The value is the length
    bronze recorded; an output that is not exactly once misses the goal."""
    run = _result(doc, "platform_one_line")
    finished = bool(run) and not run.get("not_measured")
    lengths = [line["line_bytes"] for line in run.get("cut_lines") or []]
    exact = all((run.get(layer) or {}).get("exactly_once") for layer in ("bronze", "silver"))
    value = round(max(lengths) / 1e9, 2) if finished and lengths else None
    return {"goal": "one line without a break, default driver memory: the day ingested exactly once",
            "target": f">= {ONE_LINE_GB:g} GB", "value": value,
            "reached": None if value is None else value >= ONE_LINE_GB and exact,
            "why_not_measured": None if value is not None else
            (_why(doc, "platform_one_line") if not finished else "bronze recorded no cut line")}


def ladder_rows(doc: Document) -> list[dict[str, Any]]:
    """The floor, the steps measured after it (`--only ladder`) and the platform: each one's rate,
    its micro-batches' seconds, and its rate against the floor's and the step's before it."""
    runs = sorted(((r["step"], label, r) for label, r in doc.get("results", {}).items()
                   if isinstance(r, dict) and "step" in r and r.get("events_per_s")),
                  key=lambda t: t[0])
    if len(runs) < 2:
        return []
    platform = _result(doc, "platform")
    if platform.get("events_per_s"):
        runs.append((None, "platform", {**platform, "what": "+ the landing reader and the "
                                             "driver around it: `weir run --once`"}))
    floor = runs[0][2]["events_per_s"]
    rows, before = [], None
    for step, label, r in runs:
        rate = float(r["events_per_s"])
        rows.append({"step": step, "run": label, "what": r["what"], "events_per_s": rate,
                     "batch_s": r.get("batch_s"), "vs_floor": rate / floor,
                     "vs_step_before": None if before is None else rate / before})
        before = rate
    return rows


def scaling_rows(doc: Document) -> list[dict[str, Any]]:
    """Events/s of each job per input size (the scale curve): 1x and 4x."""
    sizes = {name: d["lines"] for name, d in doc.get("datasets", {}).items()}
    rows = []
    for job, key in (("ceiling", "ceiling"), ("bare", "bare"), ("platform → silver", "platform"),
                     ("platform → gold", "platform:gold")):
        for suffix, dataset in (("", "x1"), ("_x4", "x4")):
            label, _, layer = key.partition(":")
            value = rate(doc, f"{label}{suffix}{':' + layer if layer else ''}")
            if value:
                rows.append({"job": job, "dataset": dataset, "lines": sizes.get(dataset),
                             "events_per_s": value})
    return rows


def _code(env: dict[str, Any]) -> str:
    """The code a run measured: its commit, and what differed from it (older records name only
    the commit)."""
    changed = env.get("git_changed") or []
    if not changed:
        return env["git_commit"]
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"{env['git_commit']} with uncommitted changes to {shown}"


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return f"{text}{unit}"
    return f"{value}{unit}"


def _per_query(label: str, split: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A run's time split by query: {query: split} already, or one query's (the bare job's, or
    the platform's ingest query under steady arrival)."""
    if all(isinstance(v, dict) for v in split.values()):
        return split
    return {"ingest" if label.startswith("platform") else label.split("_")[0]: split}


def markdown_summary(doc: Document) -> str:
    s = doc["summary"]
    lines: list[str] = []
    env = doc["environment"]
    load = s.get("load") or machine_load(doc)
    between = load["between_workers_max_1m"]
    lines += [f"# Weir benchmark {doc['started_at']}", "",
              f"`{doc['command']}` — {doc['wall_s']:.0f} s, {env['host_cores']} cores, 1-minute load "
              f"average {_fmt(load['before_1m'])} before the run (what \"loaded\" is judged on) / "
              f"{_fmt(load['after_1m'])} after it"
              f"{f' / at most {_fmt(between)} between workers' if between is not None else ''} "
              f"(after and between include the harness's own workers) (git {_code(env)})"
              f"{' — QUICK smoke run: tiny data, not a measurement' if doc['quick'] else ''}.",
              ""]
    if load["loaded"]:
        lines += [f"**The machine was loaded when this run started (1-minute load average "
                  f"{_fmt(load['before_1m'])} before the run, above its {load['cores']} cores): "
                  "absolute numbers are low and noisy; the ratios, measured side by side, are what "
                  "to read.**", ""]
    lines += ["## Goals", "", "| goal | target | measured | reached |", "|---|---|---|---|"]
    for g in s["goals"]:
        value = _fmt(g["value"]) if g["value"] is not None else f"not measured: {g['why_not_measured']}"
        lines.append(f"| {g['goal']} | {g['target']} | {value} | "
                     f"{'—' if g['reached'] is None else _fmt(g['reached'])} |")
    lines += ["", "## Rates (input lines per second)", "", "| run | lines | events/s |", "|---|---|---|"]
    for key, title in RATES:
        label = key.partition(":")[0]
        if label not in doc["results"]:
            continue
        value = s["rates"][key]
        shown = _fmt(value, " ev/s") if value is not None else "not measured: " + _why(doc, label)
        lines.append(f"| {title} | {_fmt(_result(doc, label).get('lines'))} | {shown} |")
    lines += ["", "## Ratios (same run)", "", "| ratio | value |", "|---|---|"]
    lines += [f"| {name} | {_fmt(value, 'x')} |" for name, value in s["ratios"].items() if value is not None]
    if len(s.get("pairs") or []) > 1:
        lines += ["", f"## The landing backlog, pair by pair (`--pairs`: each the bare job, then the "
                      f"platform; the ratios above are the median of {len(s['pairs'])})", "",
                  "| pair | bare job, ev/s | platform → silver | → gold | silver vs bare | gold vs bare |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {p['pair']} | {_fmt(p['bare'])} | {_fmt(p['silver'])} | {_fmt(p['gold'])} | "
                  f"{_fmt(p['silver_vs_bare'], 'x')} | {_fmt(p['gold_vs_bare'], 'x')} |" for p in s["pairs"]]
    measured = {k: v for k, v in s["metrics"].items() if v is not None}
    if measured:
        lines += ["", "## Other measurements", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in measured.items()]
    if s.get("ladder"):
        lines += ["", "## From the floor to the platform, one feature at a time", "",
                  "| step | run | what it adds | events/s | micro-batches (s) | vs floor "
                  "| vs the step before |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {_fmt(r['step'])} | {r['run']} | {r['what']} | {_fmt(r['events_per_s'])} | "
                  f"{', '.join(f'{b:.1f}' for b in r['batch_s'] or [])} | {_fmt(r['vs_floor'], 'x')} | "
                  f"{_fmt(r['vs_step_before'], 'x')} |" for r in s["ladder"]]
    if s["scaling"]:
        lines += ["", "## Scale curve", "", "| job | input lines | events/s |", "|---|---|---|"]
        lines += [f"| {r['job']} | {r['lines']} | {_fmt(r['events_per_s'])} |" for r in s["scaling"]]
    checks = [(label, layer, r[layer]) for label, r in doc["results"].items() if isinstance(r, dict)
              for layer in ("bronze", "silver", "rows") if isinstance(r.get(layer), dict)]
    if checks:
        lines += ["", "## Output checked (count == distinct == expected)", "",
                  "| run | table | count | distinct | expected | exactly once |", "|---|---|---|---|---|---|"]
        lines += [f"| {label} | {layer} | {c['count']} | {c['distinct']} | {c['expected']} | "
                  f"{_fmt(c['exactly_once'])} |" for label, layer, c in checks]
    cut = [(label, line) for label, r in doc["results"].items() if isinstance(r, dict)
           for line in r.get("cut_lines") or []]
    if cut:
        lines += ["", "## Lines bronze keeps the first bytes of (the landing reader's cut, `line_bytes`)", "",
                  "| run | source | position | bytes kept | the line's bytes |", "|---|---|---|---|---|"]
        lines += [f"| {label} | {line['source'].rsplit('/', 1)[-1]} | {line['position']} | "
                  f"{line['kept']:,} | {line['line_bytes']:,} |" for label, line in cut]
    splits = [(label, query, split) for label, r in doc["results"].items() if isinstance(r, dict)
              for query, split in _per_query(label, r.get("time_split_ms") or {}).items() if split]
    if splits:
        lines += ["", "## Where the batch time goes (Spark's durationMs summed over batches, seconds)", "",
                  "| run | query | triggerExecution | addBatch | latestOffset | queryPlanning | walCommit "
                  "| commitOffsets |", "|---|---|---|---|---|---|---|---|"]
        keys = ("triggerExecution", "addBatch", "latestOffset", "queryPlanning", "walCommit", "commitOffsets")
        lines += [f"| {label} | {query} | " + " | ".join(_fmt(split.get(k, 0) / 1000.0) for k in keys) + " |"
                  for label, query, split in splits]
    for label, job in (("Latency run (`weir run`, every query)", "latency"),
                       ("The bare job's latency run", "bare_latency")):
        lat = _result(doc, job)
        if lat.get("batches") is not None:
            if lat.get("entry"):
                label += " with " + ", ".join(f"`{k}={v}`" for k, v in lat["entry"].items())
            lines += ["", f"{label}: {lat.get('events_measured')} events measured of "
                          f"{lat.get('events_written')} written at {_fmt(lat.get('rate'))} ev/s, "
                          f"{lat.get('batches')} micro-batches, p50 {_fmt(lat.get('p50_s'), ' s')}, "
                          f"p90 {_fmt(lat.get('p90_s'), ' s')}, p99 {_fmt(lat.get('p99_s'), ' s')}, "
                          f"max {_fmt(lat.get('max_s'), ' s')}."]
            if lat.get("after_start_events"):
                lines[-1] += (f" The {lat.get('after_start_events')} events written in the first "
                              f"{lat.get('settle_s') or 0:.0f} s after the start (not in these "
                              f"numbers): p50 {_fmt(lat.get('after_start_p50_s'), ' s')}, "
                              f"p99 {_fmt(lat.get('after_start_p99_s'), ' s')}.")
    profile = _result(doc, "ingest_profile")
    if profile.get("steps_s"):
        lines += ["", f"## Where an ingest micro-batch spends its time ({profile.get('lines')} lines, "
                      "one batch)",
                  "", "| step of `IngestBatch` | seconds |", "|---|---|"]
        lines += [f"| {step} | {_fmt(float(sec))} |" for step, sec in profile["steps_s"].items()]
    if s["growth"]:
        lines += ["", "## One micro-batch as silver grows (median seconds; `IngestBatch` on lines new to "
                      "every table)", "",
                  "| silver rows | silver files | small batch: whole | its silver write | silver files: keys "
                  "read / key hashes compared / read | large batch: whole | its silver write | a "
                  "driver's first batch: whole (key hashes read) |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in s["growth"]:
            small, large, cold = row.get("small", {}), row.get("large", {}), row.get("first", {})
            lines.append(f"| {row['silver_rows']:,} | {_fmt(row['silver_files'])} | "
                         f"{_fmt(small.get('seconds'))} | {_fmt(small.get('silver_s'))} | "
                         f"{_fmt(small.get('silver_files_read'))} / "
                         f"{_fmt(small.get('silver_files_hashed'))} / "
                         f"{_fmt(small.get('silver_hashes_read'))} | "
                         f"{_fmt(large.get('seconds'))} | {_fmt(large.get('silver_s'))} | "
                         f"{_fmt(cold.get('seconds'))} ({_fmt(cold.get('silver_hashes_read'))}) |")
        first = s["growth"][0]
        lines.append(f"\nSmall batch: {_fmt(first.get('small', {}).get('lines'))} lines; large batch: "
                     f"{_fmt(first.get('large', {}).get('lines'))} lines.")
        lines += rebuild_lines(s["growth"], _result(doc, "silver_growth").get("driver_heap_mb"))
    backfill = _result(doc, "backfill")
    if backfill.get("steps"):
        rerun = backfill.get("rerun_steps") or {}
        lines += ["", f"## Where a back-fill of one day spends its time ({backfill.get('lines_read')} bronze "
                      "lines read)", "",
                  "| step | first run, s | rerun (nothing to change), s |", "|---|---|---|"]
        lines += [f"| {step} | {_fmt(float(sec))} | {_fmt(rerun.get(step))} |"
                  for step, sec in backfill["steps"].items()]
    if backfill.get("growth"):
        steps = list(backfill["growth"][0]["steps"])
        lines += ["", "## The same day's back-fill among days of history (copies of the day under earlier "
                      "dates in bronze, silver and quarantine, each size on shallow clones of its own; "
                      "the day's silver and gold deleted, back-filled, then back-filled again: nothing to "
                      "change; the sizes "
                      "taking turns, one round each way, each turn a fresh worker warmed by a back-fill "
                      "with nothing to change, the cold column: the means)", "",
                  "| days | bronze rows | silver rows | bronze lines read | back-fill, s | "
                  + " | ".join(f"{step}, s" for step in steps) + " | rerun, s | cold, s |",
                  "|---|---|---|---|---|" + "---|" * len(steps) + "---|---|"]
        lines += [f"| {row.get('days', '')} | {_fmt(row.get('bronze_rows'))} | {_fmt(row['silver_rows'])} | "
                  f"{_fmt(row.get('lines_read'))} | {_fmt(row['seconds'])} | "
                  + " | ".join(_fmt(row["steps"].get(step)) for step in steps)
                  + f" | {_fmt(row.get('rerun_seconds'))} | {_fmt(row.get('cold_seconds'))} |"
                  for row in backfill["growth"]]
    if s["memory"]:
        lines += ["", "## Peak memory and CPU time per run (sampled from /proc every 0.5 s)", "",
                  "| run | largest JVM peak RSS (VmHWM) MB | process tree peak RSS MB | process tree CPU s "
                  "| of which in the measured span |", "|---|---|---|---|---|"]
        lines += [f"| {label} | {_fmt(mem.get('jvm_peak_rss_mb'))} | {_fmt(mem.get('tree_peak_rss_mb'))} | "
                  f"{_fmt(mem.get('cpu_s'))} | {_fmt(mem.get('span_cpu_s'))} |"
                  for label, mem in s["memory"].items()]
    by_query = s.get("cpu_by_query") or []
    if by_query:
        lines += ["", "## CPU by query (`weir run --once` runs its queries one after another; "
                      "a query's span ends at its table's last commit)", "",
                  "| run | query | span s | CPU s |", "|---|---|---|---|"]
        lines += [f"| {q['run']} | {q['query']} | {_fmt(q['span_s'])} | {_fmt(q['cpu_s'])} |"
                  for q in by_query]
    for label, r in doc["results"].items():
        if isinstance(r, dict) and r.get("jvm_profile"):
            title = f"## Where the {label} driver's CPU goes (JDK Flight Recorder, `--jvm-profile`)"
            lines += ["", title, "", *jvm_profile.markdown(r["jvm_profile"])]
    failures = [(label, r.get("not_measured")) for label, r in doc["results"].items()
                if isinstance(r, dict) and r.get("not_measured")]
    if failures:
        lines += ["", "## Not measured", ""] + [f"- {label}: {_short(str(why))}" for label, why in failures]
    datasets = doc.get("datasets", {})
    if datasets:
        lines += ["", "## Input", ""] + [
            f"- {name}: {d['files']} files, {d['lines']} lines ({d['valid_events']} distinct valid events), "
            f"{d['bytes'] / 1e6:.1f} MB" for name, d in datasets.items()]
    return "\n".join(lines)


def plot(doc: Document, out: Path, stem: str) -> list[Path]:
    """The plots, each only when its data was measured: rates side by side, the ladder from the
    floor to the platform, throughput over time (backlog and steady arrival), the scale curve, a
    batch's cost as silver grows, latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    s = doc["summary"]
    bars = [(key, value) for key, _ in RATES if (value := s["rates"].get(key))]
    if bars:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh([b[0] for b in bars][::-1], [b[1] for b in bars][::-1])
        ax.set_xlabel("input lines per second")
        ax.set_title("Rates, side by side (same run)")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-rates.png"))
        plt.close(fig)
    if s.get("ladder"):
        floor = s["ladder"][0]["events_per_s"]
        steps = [(r["what"], r["events_per_s"]) for r in s["ladder"]]
        if s["rates"].get("bare"):
            steps.insert(0, ("the bare job (one table, the whole backlog in one batch)", s["rates"]["bare"]))
        fig, ax = plt.subplots(figsize=(11, 4.5))
        ax.barh([what for what, _ in steps][::-1], [rate for _, rate in steps][::-1])
        for y, (_, rate) in enumerate(steps[::-1]):
            ax.text(rate, y, f" {rate / floor:.2f}x", va="center")
        ax.set_xlim(0, max(rate for _, rate in steps) * 1.15)
        ax.set_xlabel("input lines per second; x: against the floor")
        ax.set_title("From the floor to the platform, one feature at a time")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-ladder.png"))
        plt.close(fig)
    for suffix, labels, title in (
            ("throughput", ("bare", "platform"), "Backlog: rows committed over time (bare table / silver)"),
            ("steady", ("bare_steady", "platform_steady"),
             "Steady arrival: rows committed since the first file")):
        series = [(label, _result(doc, label).get("timeline")) for label in labels]
        series = [(label, points) for label, points in series if points]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, points in series:
            ax.step([0.0] + [p[0] for p in points], [0] + [p[1] for p in points], where="post", label=label)
        ceiling = s["rates"].get("ceiling")
        if ceiling and suffix == "throughput":
            total = max(points[-1][1] for _, points in series)
            ax.plot([0, total / ceiling], [0, total], linestyle=":", color="grey",
                    label=f"Spark ceiling's rate ({ceiling:,.0f} ev/s)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("rows committed")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-{suffix}.png"))
        plt.close(fig)
    if s["scaling"]:
        fig, ax = plt.subplots(figsize=(7, 4))
        for job in dict.fromkeys(r["job"] for r in s["scaling"]):
            pts = sorted((r["lines"], r["events_per_s"]) for r in s["scaling"]
                         if r["job"] == job and r["lines"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=job)
        ax.set_xscale("log")
        ax.set_xlabel("input lines (backlog)")
        ax.set_ylabel("events/s")
        ax.set_title("Scale curve (local[2])")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-scale.png"))
        plt.close(fig)
    if len(s["growth"]) > 1:
        fig, ax = plt.subplots(figsize=(7, 4))
        for kind in ("small", "large"):
            pts = [(r["silver_rows"] / 1e6, r[kind]) for r in s["growth"] if kind in r]
            if not pts:
                continue
            line, = ax.plot([p[0] for p in pts], [p[1]["seconds"] for p in pts], marker="o",
                            label=f"{kind} batch ({pts[0][1]['lines']:,} lines): whole")
            ax.plot([p[0] for p in pts], [p[1]["silver_s"] for p in pts], marker="x", linestyle="--",
                    color=line.get_color(), label=f"{kind} batch: its silver write")
        ax.set_xlabel("silver rows before the batch (millions)")
        ax.set_ylabel("seconds (median)")
        ax.set_ylim(0, 1.4 * max(r[k]["seconds"] for r in s["growth"] for k in ("small", "large") if k in r))
        ax.set_title("One micro-batch's cost as silver grows")
        ax.legend(loc="upper left", ncol=2, fontsize="small")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-growth.png"))
        plt.close(fig)
    run = (_result(doc, "latency").get("runs") or [{}])[0]
    latencies = run.get(LATENCY_SAMPLE) or run.get("latencies_s") or []
    if latencies:
        fig, (hist, cdf) = plt.subplots(1, 2, figsize=(9, 3.6))
        measured = run.get("events_measured") or len(latencies)
        hist.hist(latencies, bins=40, weights=[measured / len(latencies)] * len(latencies))
        hist.set_xlabel("seconds: written to landing → visible in silver")
        hist.set_ylabel("events")
        bare = sorted((_result(doc, "bare_latency").get("runs") or [{}])[0].get(LATENCY_SAMPLE) or [])
        ordered = sorted(latencies)
        cdf.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label="platform")
        if bare:
            cdf.plot(bare, [(i + 1) / len(bare) for i in range(len(bare))], label="bare job, same rate")
        cdf.axvline(3.0, linestyle=":", color="red", label="goal p99 ≤ 3 s")
        cdf.set_xlabel("seconds")
        cdf.set_ylabel("fraction of events")
        cdf.legend()
        fig.suptitle(f"End-to-end latency at {_fmt(_result(doc, 'latency').get('rate'))} ev/s, 1 s trigger")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-latency.png"))
        plt.close(fig)
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


def write(doc: Document, out: Path, *, stem: str) -> list[Path]:
    """Write `<stem>.json`, `<stem>.md` and the plots into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(doc, indent=1, default=str))
    plots = plot(doc, out, stem)
    text = markdown_summary(doc)
    if plots:
        text += "\n\n## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in plots)
    md_path.write_text(text + "\n")
    return [json_path, md_path, *plots]
