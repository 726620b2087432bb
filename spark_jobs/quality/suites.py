"""The expectation suites of a pipeline, kept beside its catalog entry as
`conf/pipelines/<name>.expectations.yaml` (a `.py` there would be taken for a pipeline).

A suite file holds `settings` (durations) and one list of expectations per layer (`silver`,
`gold`, and `sessions` for a pipeline that declares a session table); every expectation carries
a Weir severity, `warn` or `fail`. This module only reads and checks the file: it imports
neither Spark nor Great Expectations, so DAG files may use it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from spark_jobs import catalog

if TYPE_CHECKING:
    from spark_jobs.layers import PipelineTables

Severity = Literal["warn", "fail"]
Layer = Literal["silver", "gold", "sessions"]
LAYERS: tuple[Layer, ...] = ("silver", "gold", "sessions")
SEVERITIES: tuple[Severity, ...] = ("warn", "fail")
CONDITIONS = ("stream_running",)
PARAMETER = "$PARAMETER"
DEFAULT_EVENT_TIME_TOLERANCE = dt.timedelta(minutes=10)
DEFAULT_FRESHNESS_LAG = dt.timedelta(minutes=15)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(second|minute|hour|day)s?\s*$")


class SuiteError(ValueError):
    """A suite file that cannot be used, with the file and the entry at fault in the message."""


@dataclass(frozen=True)
class ExpectationSpec:
    """One expectation of a suite: GE type, kwargs, Weir severity, and when it applies."""

    layer: Layer
    type: str
    kwargs: dict[str, Any]
    severity: Severity
    when: str | None = None
    notes: str | None = None

    @property
    def label(self) -> str:
        """`type(columns)`: how a failure is named to people (CLI, alerts, results table)."""
        return f"{self.type}({', '.join(columns_of(self.kwargs))})"

    def parameters(self) -> set[str]:
        """Names of the `$PARAMETER` values this expectation needs at run time."""
        return {v[PARAMETER] for v in self.kwargs.values() if isinstance(v, dict) and PARAMETER in v}


@dataclass(frozen=True)
class SuiteSpec:
    """Every expectation of one pipeline, with the settings its run-time parameters depend on."""

    pipeline: str
    path: Path
    expectations: tuple[ExpectationSpec, ...]
    event_time_tolerance: dt.timedelta = DEFAULT_EVENT_TIME_TOLERANCE
    freshness_lag: dt.timedelta = DEFAULT_FRESHNESS_LAG
    extra: dict[str, Any] = field(default_factory=dict)

    def for_layer(self, layer: Layer, *, stream_running: bool) -> list[ExpectationSpec]:
        """The expectations that apply to `layer` in this run."""
        return [e for e in self.expectations
                if e.layer == layer and (e.when is None or (e.when == "stream_running" and stream_running))]

    def has_conditional(self, condition: str) -> bool:
        return any(e.when == condition for e in self.expectations)


def table_name(entry: catalog.Pipeline, layer: Layer) -> str:
    """`layer.table`: how results and people name the table a layer's expectations check."""
    if layer == "silver":
        return f"silver.{entry.events_table}"
    if layer == "sessions" and entry.sessions is not None:
        return f"gold.{entry.sessions.table}"
    return f"gold.{entry.gold_table}"


def table_path(tables: PipelineTables, layer: Layer) -> Path | None:
    """Where the table a layer's expectations check is (None: the pipeline has no such table)."""
    return {"silver": tables.silver, "gold": tables.gold, "sessions": tables.sessions}[layer]


def columns_of(kwargs: dict[str, Any]) -> list[str]:
    """The columns an expectation's kwargs name, in a stable order."""
    if "column_list" in kwargs:
        return [str(c) for c in kwargs["column_list"]]
    return [str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs]


def parse_duration(text: str | int | float, *, what: str) -> dt.timedelta:
    """`"15 minutes"`, `"30 seconds"`, `"2 hours"` (or a number of seconds) as a timedelta."""
    if isinstance(text, int | float):
        return dt.timedelta(seconds=float(text))
    match = _DURATION.match(str(text))
    if not match:
        raise SuiteError(f"{what}: not a duration like '15 minutes': {text!r}")
    amount, unit = float(match.group(1)), match.group(2)
    return dt.timedelta(**{f"{unit}s": amount})


def suite_path(pipeline: str) -> Path:
    return catalog.catalog_dir() / f"{pipeline}.expectations.yaml"


def load(pipeline: str) -> SuiteSpec:
    """The suite of `pipeline`, checked: known layers, severities, conditions, and GE types."""
    import yaml

    path = suite_path(pipeline)
    if not path.is_file():
        raise SuiteError(f"pipeline {pipeline!r} has no expectation suite: {path} is missing")
    document = _document(path, yaml.safe_load(path.read_text(encoding="utf-8")) or {}, seen=(pipeline,))
    if "rules" in document:
        raise SuiteError(f"{path}: row rules belong to the catalog entry now: move 'rules' to "
                         f"`row_rules=(RowRule(name, condition, action), ...)` in {pipeline}.py")
    unknown = set(document) - {"settings", *LAYERS}
    if unknown:
        raise SuiteError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    if document.get("sessions") and catalog.load(pipeline).sessions is None:
        raise SuiteError(f"{path}: 'sessions' expectations, but pipeline {pipeline!r} declares no "
                         "session table (`sessions=Sessions(...)` in its catalog entry)")
    settings = document.get("settings") or {}
    specs: list[ExpectationSpec] = []
    for layer in LAYERS:
        for index, entry in enumerate(document.get(layer) or []):
            specs.append(_entry(path, layer, index, entry))
    return SuiteSpec(
        pipeline=pipeline, path=path, expectations=tuple(specs),
        event_time_tolerance=parse_duration(
            settings.get("event_time_tolerance", "10 minutes"), what=f"{path}: event_time_tolerance"),
        freshness_lag=parse_duration(
            settings.get("freshness_lag", "15 minutes"), what=f"{path}: freshness_lag"),
        extra={k: v for k, v in settings.items() if k not in ("event_time_tolerance", "freshness_lag")},
    )


def _document(path: Path, document: Any, *, seen: tuple[str, ...]) -> dict[str, Any]:
    """The suite document with `extends: <pipeline>` resolved: the base pipeline's suite, with
    this file's `settings` keys and layer lists taking precedence (a pipeline that differs from
    another only by its source keeps one suite)."""
    import yaml

    if not isinstance(document, dict):
        raise SuiteError(f"{path}: expected a mapping with 'settings', 'silver' and 'gold'")
    base_name = document.pop("extends", None)
    if base_name is None:
        return document
    if base_name in seen:
        raise SuiteError(f"{path}: 'extends' cycle through {' -> '.join((*seen, base_name))}")
    base_path = suite_path(str(base_name))
    if not base_path.is_file():
        raise SuiteError(f"{path}: extends {base_name!r}, but {base_path} is missing")
    base = _document(base_path, yaml.safe_load(base_path.read_text(encoding="utf-8")) or {},
                     seen=(*seen, str(base_name)))
    merged = {**base, **{k: v for k, v in document.items() if k != "settings"}}
    merged["settings"] = {**(base.get("settings") or {}), **(document.get("settings") or {})}
    return merged


def _entry(path: Path, layer: Layer, index: int, entry: Any) -> ExpectationSpec:
    where = f"{path}: {layer}[{index}]"
    if not isinstance(entry, dict) or "type" not in entry:
        raise SuiteError(f"{where}: expected a mapping with 'type', 'kwargs' and 'severity'")
    unknown = set(entry) - {"type", "kwargs", "severity", "when", "notes"}
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    severity = entry.get("severity")
    if severity not in SEVERITIES:
        raise SuiteError(f"{where}: severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")
    when = entry.get("when")
    if when is not None and when not in CONDITIONS:
        raise SuiteError(f"{where}: 'when' must be one of {', '.join(CONDITIONS)}, not {when!r}")
    kwargs = entry.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise SuiteError(f"{where}: kwargs must be a mapping")
    return ExpectationSpec(layer=layer, type=str(entry["type"]), kwargs=dict(kwargs),
                           severity=severity, when=when, notes=entry.get("notes"))
