"""Turn a suite run into its record: the JSON document, a markdown table, and PNG plots
(throughput over time, latency distribution, scaling). Ratios and goals are computed here, only
from numbers measured in the same run; anything missing reads "not measured: <why>"."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
Document = dict[str, Any]


def _result(doc: Document, label: str) -> dict[str, Any]:
    value = doc["results"].get(label)
    return value if isinstance(value, dict) else {}


def _why(doc: Document, label: str) -> str:
    """Why `label` has no number: its recorded reason, or that it was not selected."""
    r = _result(doc, label)
    if not r:
        return "not selected in this run" if label not in doc.get("selected", []) else "no result"
    return _short(str(r.get("not_measured") or r.get("error") or "no number in its result"))


def _short(text: str, limit: int = 220) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _rate(doc: Document, label: str, *, sustained: bool = True) -> float | None:
    r = _result(doc, label)
    value = (r.get("sustained_events_per_s") if sustained else None) or r.get("events_per_s")
    return float(value) if value else None


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


def summarise(doc: Document) -> dict[str, Any]:
    """Headline metrics, ratios and goals of a run."""
    ceiling = _rate(doc, "ceiling")
    bare = _rate(doc, "bare")
    silver = _rate(doc, "platform_silver")
    gold = _rate(doc, "platform_gold")
    latency = _result(doc, "latency")
    backfill = _rate(doc, "backfill")
    recovery = _result(doc, "recovery")
    dq = _result(doc, "dq")
    kafka = _result(doc, "kafka")
    kafka_files = (kafka.get("result") or {}).get("landing_files_events_per_s")
    stream_s_per_million = 1e6 / silver if silver else None
    memory = {label: r["memory"] for label, r in doc["results"].items()
              if isinstance(r, dict) and isinstance(r.get("memory"), dict)}
    peaks = [m["jvm_peak_rss_mb"] for m in memory.values() if m.get("jvm_peak_rss_mb")]
    metrics: dict[str, Any] = {
        "ceiling_events_per_s": ceiling,
        "ceiling_transforms_events_per_s": _rate(doc, "ceiling_transforms"),
        "bare_events_per_s": bare,
        "platform_silver_events_per_s": silver,
        "platform_gold_events_per_s": gold,
        "bare_wall_events_per_s": _rate(doc, "bare", sustained=False),
        "platform_silver_wall_events_per_s": _rate(doc, "platform_silver", sustained=False),
        "latency_rate_events_per_s": latency.get("rate"),
        "latency_p50_s": latency.get("p50_s"),
        "latency_p99_s": latency.get("p99_s"),
        "recovery_detection_s": recovery.get("detection_s"),
        "recovery_first_commit_s": recovery.get("first_commit_s"),
        "backfill_events_per_s": backfill,
        "backfill_rerun_s": (_result(doc, "backfill").get("runs") or [{}])[0].get("rerun_seconds"),
        "dq_s_per_million_rows": dq.get("seconds_per_million_rows"),
        "stream_s_per_million_rows": stream_s_per_million,
        "dag_parse_max_net_s": _result(doc, "dag_parse").get("max_net_s"),
        "peak_driver_rss_mb": max(peaks) if peaks else None,
        # bench/kafka_throughput runs both sources itself, side by side on one dataset
        "kafka_events_per_s": kafka.get("events_per_s"),
        "kafka_run_landing_files_events_per_s": kafka_files,
    }
    ratios = {
        "platform_silver_vs_bare": _ratio(silver, bare),
        "platform_silver_vs_ceiling": _ratio(silver, ceiling),
        "bare_vs_ceiling": _ratio(bare, ceiling),
        "platform_gold_vs_bare": _ratio(gold, bare),
        "backfill_vs_stream_gold": _ratio(backfill, gold),
        "backfill_vs_stream_silver": _ratio(backfill, silver),
        # dq_cost measures both on the same data in one session: prefer its own ratio.
        "dq_vs_stream_cost": dq.get("dq_vs_stream") or _ratio(metrics["dq_s_per_million_rows"],
                                                               stream_s_per_million),
        "kafka_vs_landing_files": _ratio(kafka.get("events_per_s"), kafka_files),
    }

    def goal(name: str, target: str, value: float | None, reached: bool | None,
             missing: str) -> dict[str, Any]:
        return {"goal": name, "target": target, "value": value, "reached": reached,
                "why_not_measured": None if value is not None else missing}

    p99 = metrics["latency_p99_s"]
    first_commit = metrics["recovery_first_commit_s"]
    goals = [
        goal("platform vs bare Spark throughput (landing → silver)", ">= 0.9x",
             ratios["platform_silver_vs_bare"],
             None if ratios["platform_silver_vs_bare"] is None else ratios["platform_silver_vs_bare"] >= 0.9,
             _why(doc, "bare" if silver else "platform_silver")),
        goal("platform vs Spark's ceiling", ">= 0.5x", ratios["platform_silver_vs_ceiling"],
             None if ratios["platform_silver_vs_ceiling"] is None
             else ratios["platform_silver_vs_ceiling"] >= 0.5,
             _why(doc, "ceiling" if silver else "platform_silver")),
        goal("p99 latency at half load, 1 s trigger", "<= 3 s", p99,
             None if p99 is None else p99 <= 3.0, _why(doc, "latency")),
        goal("recovery: kill -9 → first committed batch of the successor", "<= 45 s", first_commit,
             None if first_commit is None else first_commit <= 45.0, _why(doc, "recovery")),
        goal("back-fill vs streaming rate (landing → gold)", ">= 3x", ratios["backfill_vs_stream_gold"],
             None if ratios["backfill_vs_stream_gold"] is None else ratios["backfill_vs_stream_gold"] >= 3.0,
             _why(doc, "backfill" if gold else "platform_gold")),
        goal("DQ validation cost vs the stream's own processing", "< 1x", ratios["dq_vs_stream_cost"],
             None if ratios["dq_vs_stream_cost"] is None else ratios["dq_vs_stream_cost"] < 1.0,
             _why(doc, "platform_silver" if dq.get("seconds_per_million_rows") else "dq")),
    ]
    return {"metrics": metrics, "ratios": ratios, "goals": goals, "scaling": scaling_rows(doc),
            "memory": memory, "load": machine_load(doc)}


def scaling_rows(doc: Document) -> list[dict[str, Any]]:
    """Throughput of the platform and of the bare job per input size and core count."""
    sizes = {name: d["lines"] for name, d in doc.get("datasets", {}).items()}
    base = sizes.get("x1")
    rows = []
    for label, r in doc["results"].items():
        if not isinstance(r, dict) or r.get("workload") not in ("platform_silver", "bare"):
            continue
        if not (label in ("bare", "platform_silver") or label.startswith("scale_")):
            continue
        lines = r.get("lines") or sizes.get(r.get("dataset", ""))
        rows.append({"label": label, "job": "platform" if r["workload"] == "platform_silver" else "bare",
                     "master": r.get("master"), "dataset": r.get("dataset"), "lines": lines,
                     "multiplier": round(lines / base, 1) if lines and base else None,
                     "seconds": r.get("seconds"), "events_per_s": _rate(doc, label)})
    return sorted(rows, key=lambda row: (row["job"], row["master"] or "", row["lines"] or 0))


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return f"{text}{unit}"
    return f"{value}{unit}"


def markdown_summary(doc: Document) -> str:
    s = doc["summary"]
    m, lines = s["metrics"], []
    env = doc["environment"]
    load = s.get("load") or machine_load(doc)
    between = load["between_workers_max_1m"]
    lines += [f"# Weir benchmark {doc['started_at']}", "",
              f"`{doc['command']}` — {doc['wall_s']:.0f} s, {env['host_cores']} cores, 1-minute load "
              f"average {_fmt(load['before_1m'])} before the run (what \"loaded\" is judged on) / "
              f"{_fmt(load['after_1m'])} after it"
              f"{f' / at most {_fmt(between)} between workers' if between is not None else ''} "
              f"(after and between include the harness's own workers) (git {env['git_commit']})"
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
    rows = [
        ("Spark ceiling: batch read + from_json → noop", m["ceiling_events_per_s"], " ev/s", "ceiling"),
        ("batch read + the platform's parse/silver transforms → noop", m["ceiling_transforms_events_per_s"],
         " ev/s", "ceiling_transforms"),
        ("bare Structured Streaming: text → from_json → Delta (sustained)", m["bare_events_per_s"], " ev/s",
         "bare"),
        ("platform landing → silver (ingest query, sustained)", m["platform_silver_events_per_s"], " ev/s",
         "platform_silver"),
        ("platform landing → gold (run once, wall)", m["platform_gold_events_per_s"], " ev/s",
         "platform_gold"),
        ("latency p50 at half load, 1 s trigger", m["latency_p50_s"], " s", "latency"),
        ("latency p99 at half load, 1 s trigger", m["latency_p99_s"], " s", "latency"),
        ("recovery: detection", m["recovery_detection_s"], " s", "recovery"),
        ("recovery: kill -9 → successor's first commit", m["recovery_first_commit_s"], " s", "recovery"),
        ("back-fill of one day (bronze → silver + gold)", m["backfill_events_per_s"], " ev/s", "backfill"),
        ("back-fill re-run (no-op)", m["backfill_rerun_s"], " s", "backfill"),
        ("DQ validation per million rows", m["dq_s_per_million_rows"], " s", "dq"),
        ("stream processing per million rows (landing → silver)", m["stream_s_per_million_rows"], " s",
         "platform_silver"),
        ("Kafka → silver (ingest query, sustained)", m["kafka_events_per_s"], " ev/s", "kafka"),
        ("landing folder → silver, same data, in the Kafka run", m["kafka_run_landing_files_events_per_s"],
         " ev/s", "kafka"),
        ("DAG file parse, slowest file (beyond importing airflow.sdk)", m["dag_parse_max_net_s"], " s",
         "dag_parse"),
        ("peak driver memory (JVM RSS, largest worker)", m["peak_driver_rss_mb"], " MB", "ceiling"),
    ]
    lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    for title, value, unit, label in rows:
        shown = _fmt(value, unit) if value is not None else "not measured: " + _why(doc, label)
        lines.append(f"| {title} | {shown} |")
    lines += ["", "## Ratios (same run)", "", "| ratio | value |", "|---|---|"]
    lines += [f"| {name} | {_fmt(value, 'x')} |" for name, value in s["ratios"].items()]
    if s["scaling"]:
        lines += ["", "## Scaling", "", "| job | master | input lines | x | seconds | events/s |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['job']} | {r['master']} | {r['lines']} | {_fmt(r['multiplier'])} | "
                  f"{_fmt(r['seconds'])} | {_fmt(r['events_per_s'])} |" for r in s["scaling"]]
    lat = _result(doc, "latency")
    if lat.get("batches") is not None:
        lines += ["", f"Latency run: {lat.get('events_measured')} events measured of "
                      f"{lat.get('events_written')} written at {_fmt(lat.get('rate'))} ev/s, "
                      f"{lat.get('batches')} micro-batches, p90 {_fmt(lat.get('p90_s'), ' s')}, "
                      f"max {_fmt(lat.get('max_s'), ' s')}."]
    profile = _result(doc, "ingest_profile")
    if profile.get("steps_s"):
        lines += ["", f"## Where an ingest micro-batch spends its time ({profile.get('lines')} lines, "
                      "one batch)",
                  "", "| step of `IngestBatch` | seconds |", "|---|---|"]
        lines += [f"| {step} | {_fmt(float(sec))} |" for step, sec in profile["steps_s"].items()]
        lines += ["", f"Rows in the alternative table after the replayed append: "
                      f"{profile.get('alt_rows_after_replay')} (= one copy)."]
    if s["memory"]:
        lines += ["", "## Peak memory per worker", "",
                  "| measurement | JVM peak RSS MB | heap pools peak MB | python peak RSS MB |",
                  "|---|---|---|---|"]
        lines += [f"| {label} | {_fmt(mem.get('jvm_peak_rss_mb'))} | "
                  f"{_fmt(mem.get('jvm_heap_pools_peak_mb'))} | "
                  f"{_fmt(mem.get('python_peak_rss_mb'))} |" for label, mem in s["memory"].items()]
    failures = [(label, r.get("not_measured") or r.get("error")) for label, r in doc["results"].items()
                if isinstance(r, dict) and (r.get("not_measured") or r.get("error"))]
    if failures:
        lines += ["", "## Not measured", ""] + [f"- {label}: {_short(str(why))}" for label, why in failures]
    datasets = doc.get("datasets", {})
    if datasets:
        lines += ["", "## Input", ""] + [
            f"- {name}: {d['files']} files, {d['lines']} lines ({d['valid_events']} distinct valid events), "
            f"{d['bytes'] / 1e6:.1f} MB" for name, d in datasets.items()]
    return "\n".join(lines)


def plot(doc: Document, out: Path, stem: str) -> list[Path]:
    """The three plots; each only when its data was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    series = []
    for label, title in (("bare", "bare Spark → Delta"), ("platform_silver", "platform → bronze/silver")):
        runs = _result(doc, label).get("runs") or []
        if runs and runs[0].get("timeline"):
            series.append((title, runs[0]["timeline"]))
    if series:
        fig, ax = plt.subplots(figsize=(7, 4))
        for title, points in series:
            ax.step([0.0] + [p[0] for p in points], [0] + [p[1] for p in points], where="post", label=title)
        ceiling = _rate(doc, "ceiling")
        if ceiling and series:
            total = max(points[-1][1] for _, points in series)
            ax.plot([0, total / ceiling], [0, total], linestyle=":", color="grey",
                    label=f"Spark ceiling: the same input in {total / ceiling:.1f} s ({ceiling:,.0f} ev/s)")
        ax.set_xlabel("seconds since the query started")
        ax.set_ylabel("events committed")
        ax.set_title("Throughput over time (landing → Delta, same input)")
        ax.legend()
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-throughput.png"))
        plt.close(fig)
    latencies = _result(doc, "latency").get("latencies_s") or []
    if not latencies:
        runs = _result(doc, "latency").get("runs") or []
        latencies = runs[0].get("latencies_s", []) if runs else []
    if latencies:
        fig, (hist, cdf) = plt.subplots(1, 2, figsize=(9, 3.6))
        hist.hist(latencies, bins=40)
        hist.set_xlabel("seconds: written to landing → visible in silver")
        hist.set_ylabel("events")
        ordered = sorted(latencies)
        cdf.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))])
        cdf.axvline(3.0, linestyle=":", color="red", label="goal p99 ≤ 3 s")
        cdf.set_xlabel("seconds")
        cdf.set_ylabel("fraction of events")
        cdf.legend()
        fig.suptitle(f"End-to-end latency at {_fmt(_result(doc, 'latency').get('rate'))} ev/s, 1 s trigger")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-latency.png"))
        plt.close(fig)
    rows = doc["summary"]["scaling"]
    if rows:
        fig, (by_size, by_cores) = plt.subplots(1, 2, figsize=(9, 3.6))
        for job in ("bare", "platform"):
            pts = sorted((r["lines"], r["events_per_s"]) for r in rows
                         if r["job"] == job and r["master"] == "local[2]" and r["events_per_s"])
            if pts:
                by_size.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=job)
        by_size.set_xscale("log")
        by_size.set_xlabel("input lines (1x, 4x, 16x)")
        by_size.set_ylabel("events/s")
        by_size.set_title("Cost as input grows (local[2])")
        by_size.legend()
        bars = [(f"{r['job']}\n{r['master']}", r["events_per_s"]) for r in rows
                if r["multiplier"] == 1 and r["events_per_s"]]
        by_cores.bar([b[0] for b in bars], [b[1] for b in bars])
        by_cores.set_ylabel("events/s")
        by_cores.set_title("1 core vs 2 cores (1x input)")
        fig.tight_layout()
        written.append(_save(fig, out / f"{stem}-scaling.png"))
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
