"""Server-rendered HTML of the cockpit: the overview table and a pipeline's page. Every value is
escaped; links inside the view are relative, links to Airflow's own pages open at the top."""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from spark_jobs.cockpit.actions import Action, Field
from weir_airflow.cockpit.svg import Line, line_plot
from weir_airflow.cockpit.trigger import Triggered

STYLE = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ddd;padding:3px 8px;
font-size:13px;text-align:left}th{background:#f4f4f4}.RUNNING{color:#1a7f37}.FAILED,.STALLED{color:#c62828}
.plots svg{margin:4px 12px 4px 0;border:1px solid #eee}pre{background:#f6f6f6;padding:6px;font-size:12px}
"""


def _cell(value: Any, digits: int = 1) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        return escape(f"{value:.{digits}f}")
    return escape(str(value))


# Inside Airflow's UI the view is an iframe sandboxed without `allow-top-navigation`, so a link to
# one of Airflow's own pages (`data-airflow`, target=_top for the view opened on its own) cannot
# navigate the top window; the frame is same-origin, so it asks Airflow's router to go there.
OPEN_IN_AIRFLOW = """
document.addEventListener('click', function (e) {
  var a = e.target.closest('a[data-airflow]');
  if (!a || window.parent === window) return;
  try {
    window.parent.history.pushState(null, '', a.href);
    window.parent.dispatchEvent(new PopStateEvent('popstate', {state: null}));
    e.preventDefault();
  } catch (err) { /* another origin: the link's own target applies */ }
});
"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style><script>{OPEN_IN_AIRFLOW}</script></head><body>{body}</body></html>")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _share(quarantine: dict[str, Any]) -> str:
    share = quarantine.get("share")
    if share is None:
        return "–"
    return escape(f"{100 * share:.2f}% ({quarantine['quarantine_rows']}/{quarantine['bronze_rows']})")


def _dq(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return "–"
    word = "passed" if verdict["success"] else f"failed ({verdict['failed']}/{verdict['expectations']})"
    return escape(f"{word} at {verdict['run_time']}")


def _lag(query: dict[str, Any]) -> str:
    if query.get("kafka_lag") is None:
        return "–"
    parts = query.get("kafka_lag_by_partition") or {}
    return escape(f"{query['kafka_lag']} ({', '.join(f'{p}: {n}' for p, n in sorted(parts.items()))})")


def overview_page(pipelines: list[dict[str, Any]]) -> str:
    """Every pipeline of the catalog, one row per query of its driver."""
    rows = []
    for p in pipelines:
        queries = p["progress"] or {"–": {}}
        for index, (qname, q) in enumerate(sorted(queries.items())):
            first = index == 0
            link = f"<a href='pipelines/{quote(p['pipeline'])}'>{escape(p['pipeline'])}</a>"
            rows.append([
                link if first else "",
                f"<span class='{escape(p['state'])}'>{escape(p['state'])}</span>" if first else "",
                _cell(p["driver_pid"]) if first else "", _cell(p["restarts"]) if first else "",
                escape(qname), _cell(q.get("batch_id")), _cell(q.get("progress_at")),
                _cell(q.get("input_rows_per_second")), _cell(q.get("processed_rows_per_second")),
                _lag(q), _cell(p["watermark"]) if first else "",
                _share(p["quarantine"]) if first else "", _dq(p["dq"]) if first else ""])
    table = _table(["pipeline", "state", "driver pid", "restarts (window)", "query", "last batch",
                    "last batch at (UTC)", "input rows/s", "processed rows/s", "Kafka lag",
                    "watermark", "quarantine share", "latest DQ"], rows)
    return _page("Weir", f"<h2>Weir pipelines</h2>{table}"
                 "<p><small>JSON: <a href='api/pipelines'>api/pipelines</a></small></p>")


def _plots(detail: dict[str, Any]) -> str:
    start, end = detail["window"]["from"], detail["window"]["to"]
    series = detail["series"]

    def lines(measure: str) -> list[Line]:
        return [Line(q, s[measure]) for q, s in sorted(series.items())]

    plots = [line_plot("input rows/s", lines("input_rows_per_second"), start=start, end=end),
             line_plot("processed rows/s", lines("processed_rows_per_second"), start=start, end=end),
             line_plot("batch duration", lines("batch_duration_ms"), start=start, end=end, unit=" ms"),
             line_plot("Kafka lag (records)", lines("kafka_lag"), start=start, end=end)]
    return f"<div class='plots'>{''.join(plots)}</div>"


def pipeline_page(detail: dict[str, Any], *, airflow_root: str) -> str:
    """One pipeline: summary, plots over the window, batches, event log, DQ, checkpoint, actions."""
    name = detail["pipeline"]
    summary = _table(["state", "detail", "driver pid", "restarts (window)", "supervisor", "heartbeat",
                      "watermark", "quarantine share", "latest DQ"],
                     [[f"<span class='{escape(detail['state'])}'>{escape(detail['state'])}</span>",
                       _cell(detail["detail"]), _cell(detail["driver_pid"]), _cell(detail["restarts"]),
                       _cell(detail["supervisor"]), _cell(detail["heartbeat_at"]),
                       _cell(detail["watermark"]), _share(detail["quarantine"]), _dq(detail["dq"])]])
    batches = _table(["query", "batch", "at (UTC)", "input rows", "input rows/s", "processed rows/s",
                      "duration ms", "watermark", "Kafka lag"],
                     [[_cell(b[k]) for k in ("query", "batch_id", "progress_at", "num_input_rows",
                                             "input_rows_per_second", "processed_rows_per_second",
                                             "batch_duration_ms", "watermark", "kafka_lag")]
                      for b in detail["batches"]])
    events = _table(["time (UTC)", "action", "outcome", "actor", "reason", "approval"],
                    [[_cell(e[k]) for k in ("event_time", "action", "outcome", "actor", "reason")]
                     + [_approval(e.get("details"))] for e in detail["events"]])
    dq = _table(["table", "expectation", "severity", "success", "observed", "unexpected", "rows"],
                [[_cell(r[k]) for k in ("table", "expectation", "severity", "success", "observed_value",
                                        "unexpected_count", "element_count")]
                 for r in detail["dq_results"]])
    checkpoint = detail["checkpoint"]
    generation = checkpoint["generation"]
    queries = _table(["query", "last committed batch", "path"],
                     [[escape(q), _cell(c["last_committed_batch"]), _cell(c["path"])]
                      for q, c in checkpoint["queries"].items()])
    backups = _table(["backup", "created (UTC)", "kind", "batches", "actor", "reason", "actions"],
                     [[_cell(b["id"]), _cell(b["created_at"]), _cell(b["kind"]),
                       escape(", ".join(f"{q}: {c['batch']}" for q, c in b["queries"].items())),
                       _cell(b["actor"]), _cell(b["reason"]), _backup_actions(name, b["id"])]
                      for b in checkpoint["backups"]])
    actions = _table(["action", "DAG", "pre-filled", "approval"],
                     [[f"<a class='action' href='../{escape(a['url'])}'>{escape(a['label'])}</a>",
                       escape(a["dag_id"]), f"<pre>{escape(json.dumps(a['conf'], sort_keys=True))}</pre>",
                       _cell(a["approval"])]
                      for a in detail["actions"]])
    body = (f"<p><a href='../'>all pipelines</a></p><h2>{escape(name)}</h2>{summary}"
            f"<h3>Last hour ({escape(detail['window']['from'])} – {escape(detail['window']['to'])})</h3>"
            f"{_plots(detail)}<h3>Recent batches</h3>{batches}<h3>Event log</h3>{events}"
            f"<h3>Latest DQ run</h3>{dq}"
            f"<h3>Checkpoint (generation {escape(str(generation.get('generation')))}, "
            f"{escape(str(generation.get('origin')))})</h3>{queries}<h4>Backups</h4>{backups}"
            f"<h3>Actions</h3><p>Each opens its form here, pre-filled; submitting it triggers the "
            f"DAG in Airflow as you.</p>{actions}"
            f"<p><small>JSON: <a href='../api/pipelines/{quote(name)}'>api/pipelines/{escape(name)}</a>"
            f"</small></p>")
    return _page(f"Weir: {name}", body)


def _approval(details: dict[str, Any] | None) -> str:
    """Who approved (or rejected) an action and why, from its event (a restart's: its checkpoint's)."""
    details = details or {}
    approval = details.get("approval") or (details.get("checkpoint") or {}).get("approval")
    if not approval or not approval.get("decision"):
        return "–"
    return escape(f"{approval['decision']} by {approval.get('by')}: {approval.get('reason') or ''}")


def _backup_actions(pipeline: str, backup_id: str) -> str:
    """Links to the checkpoint actions that take this backup as their target, pre-filled."""
    links = []
    for verb in ("restore", "rewind"):
        query = urlencode({"action": verb, "backup_id": backup_id})
        links.append(f"<a href='{escape(quote(pipeline))}/actions/checkpoint?{escape(query)}'>{verb}</a>")
    return " ".join(links)


def _field(f: Field) -> str:
    name = escape(f.name)
    value = "" if f.value is None else str(f.value)
    if f.kind == "bool":
        control = f"<input type='checkbox' name='{name}' id='{name}'{' checked' if f.value else ''}>"
    elif f.kind == "choice":
        options = "".join(f"<option{' selected' if c == value else ''}>{escape(c)}</option>"
                          for c in f.choices)
        control = f"<select name='{name}' id='{name}'>{options}</select>"
    else:
        kind = {"date": "date", "int": "number"}.get(f.kind, "text")
        control = f"<input type='{kind}' name='{name}' id='{name}' value='{escape(value)}'>"
    return (f"<tr><th><label for='{name}'>{name}</label></th><td>{control}</td>"
            f"<td><small>{escape(f.help)}</small></td></tr>")


def action_page(pipeline: str, action: Action, *, error: str | None = None) -> str:
    """An action's form, pre-filled; it posts back to itself (see the app's `action_trigger`)."""
    what = "an Airflow back-fill, one run per date" if action.backfill else "a run"
    body = (f"<p><a href='../../{escape(quote(pipeline))}'>{escape(pipeline)}</a></p>"
            f"<h2>{escape(action.label)} of {escape(pipeline)}</h2>"
            f"<p>Triggers {what} of <b>{escape(action.dag_id)}</b> in Airflow, as you.</p>"
            + (f"<p class='FAILED' id='error'>{escape(error)}</p>" if error else "")
            + (f"<p><i>{escape(action.approval)}</i></p>" if action.approval else "")
            + f"<form method='post'><table>{''.join(_field(f) for f in action.fields)}</table>"
              f"<button type='submit' id='trigger'>Trigger {escape(action.dag_id)}</button></form>")
    return _page(f"Weir: {action.label} {pipeline}", body)


def triggered_page(pipeline: str, action: Action, conf: dict[str, Any], done: Triggered, *,
                   airflow_root: str) -> str:
    """What Airflow answered to an action: a link to the new run (or back-fill), or its refusal."""
    back = f"<p><a href='../../{escape(quote(pipeline))}'>{escape(pipeline)}</a></p>"
    sent = f"<pre>{escape(json.dumps(conf, sort_keys=True, default=str))}</pre>"
    if not done.ok:
        detail = escape(json.dumps(done.detail, default=str)[:2000])
        return _page("Weir: not triggered", f"{back}<h2>Airflow refused {escape(done.what)} "
                     f"({done.status})</h2><p class='FAILED' id='error'>{detail}</p>{sent}")
    href = escape(airflow_root + (done.ui_path or ""))
    link = f"<a id='run' data-airflow target='_top' href='{href}'>{escape(done.what)}</a>"
    note = f"<p><i>{escape(action.approval)}</i></p>" if action.approval else ""
    return _page("Weir: triggered", f"{back}<h2>Triggered</h2><p>{link}</p>{note}{sent}")
