"""The on-call actions the cockpit offers for a pipeline: which DAG each one triggers, with which
fields pre-filled. Airflow 3.3.2's UI cannot open its trigger form pre-filled from a URL (added
in apache/airflow#59231, reverted in #59769), so the cockpit shows its own form per action and
triggers the DAG through Airflow's REST API as the signed-in user (weir_airflow.cockpit.trigger).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urlencode

from spark_jobs.checkpoints.actions import ACTIONS as CHECKPOINT_ACTIONS
from spark_jobs.checkpoints.refresh import ORIGINS as REFRESH_ORIGINS
from spark_jobs.control.oncall import MODES as RESTART_MODES
from spark_jobs.errors import UserError


class BadActionInputError(UserError):
    """A form value that does not fit its field (not a number, not one of the choices)."""


@dataclass(frozen=True)
class Field:
    """One run-configuration key of an action's form: its value (the pre-filled one), its kind,
    and whether an empty input means None (a nullable Param) rather than ""."""

    name: str
    value: Any = None
    kind: str = "text"
    choices: tuple[str, ...] = ()
    nullable: bool = True
    help: str = ""

    def parse(self, text: str | None) -> Any:
        """The value of this field from a submitted form (`text` None: a checkbox left empty)."""
        if self.kind == "bool":
            return (text or "").lower() in ("on", "true", "1", "yes")
        text = (text or "").strip()
        if not text:
            if self.kind == "date":
                raise BadActionInputError(f"{self.name}: a date (YYYY-MM-DD) is needed")
            return None if self.nullable else ""
        if self.kind == "date":
            try:
                return dt.date.fromisoformat(text).isoformat()
            except ValueError:
                raise BadActionInputError(f"{self.name}: not a date (YYYY-MM-DD): {text!r}") from None
        if self.kind == "int":
            try:
                return int(text)
            except ValueError:
                raise BadActionInputError(f"{self.name}: not a whole number: {text!r}") from None
        if self.kind == "choice" and text not in self.choices:
            raise BadActionInputError(f"{self.name}: {text!r} is not one of {', '.join(self.choices)}")
        return text


@dataclass(frozen=True)
class Action:
    """One action: a key (its form's URL), a label, the DAG it runs and its form's fields.
    `backfill`: created as an Airflow back-fill (one run per date `from_date`..`to_date`) rather
    than a single DAG run; `approval`: a person approves its plan in Airflow before it runs."""

    key: str
    label: str
    dag_id: str
    fields: tuple[Field, ...] = field(default_factory=tuple)
    backfill: bool = False
    approval: str = ""

    @property
    def conf(self) -> dict[str, Any]:
        return {f.name: f.value for f in self.fields}

    def url(self, pipeline: str) -> str:
        """The action's form, relative to the cockpit's root, its values in the query string."""
        values = {k: str(v).lower() if isinstance(v, bool) else v for k, v in self.conf.items()
                  if v not in (None, "")}
        return f"pipelines/{quote(pipeline)}/actions/{self.key}" + (f"?{urlencode(values)}" if values else "")

    def prefilled(self, values: Mapping[str, str]) -> Action:
        """This action with the fields named in `values` (a query string) pre-filled."""
        return replace(self, fields=tuple(replace(f, value=f.parse(values[f.name])) if f.name in values
                                          else f for f in self.fields))

    def prefilled_from(self, form: Mapping[str, str]) -> Action:
        """This action with a submitted form's text kept as typed (to show it again with an error)."""
        return replace(self, fields=tuple(replace(f, value=form.get(f.name, f.value)) for f in self.fields))

    def conf_of(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The run configuration a submitted form asks for (every field; a missing checkbox: false)."""
        return {f.name: f.parse(form.get(f.name)) for f in self.fields}

    def as_dict(self, pipeline: str) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "dag_id": self.dag_id, "conf": self.conf,
                "backfill": self.backfill, "approval": self.approval, "url": self.url(pipeline)}


def for_pipeline(name: str, *, date_from: str | None = None, date_to: str | None = None) -> list[Action]:
    """Stop, restart, back-fill a date range, a checkpoint action and a full refresh of `name`."""
    reason = Field("reason", "", nullable=False, help="why (goes to the event log)")
    approval = "the plan waits for an approval in Airflow (Required Actions) before it runs"
    return [
        Action("stop", "stop", f"{name}_stop", (reason,)),
        Action("restart", "restart", f"{name}_restart", (
            reason, Field("mode", "restart", "choice", RESTART_MODES, nullable=False),
            Field("backup_id", help="for restore_backup (or `latest`)"),
            Field("reset_from", help="for reset: earliest | latest | TIMESTAMP")),
            approval=f"restore_backup and reset: {approval}"),
        Action("backfill", "back-fill", f"{name}_backfill", (
            Field("from_date", date_from, "date", nullable=False),
            Field("to_date", date_to, "date", nullable=False)), backfill=True),
        Action("checkpoint", "checkpoint action", f"{name}_checkpoint", (
            Field("action", "validate", "choice", CHECKPOINT_ACTIONS, nullable=False),
            Field("backup_id", help="for restore and rewind (or `latest`)"),
            Field("reset_from", help="for reset: earliest | latest | TIMESTAMP"),
            Field("keep", kind="int", help="for prune"),
            Field("dry_run", False, "bool", help="only say what would change"),
            Field("reason")),
            approval=f"restore, rewind, reset and prune: {approval}"),
        Action("refresh", "full refresh", f"{name}_refresh", (
            Field("origin", "bronze", "choice", REFRESH_ORIGINS, nullable=False), reason),
            approval=approval),
    ]


def find(name: str, key: str) -> Action:
    """The action `key` of pipeline `name`; `KeyError` when there is none."""
    for action in for_pipeline(name):
        if action.key == key:
            return action
    raise KeyError(key)
