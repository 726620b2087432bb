"""The on-call actions the cockpit offers for a pipeline: which DAG each one triggers and with
what run configuration, so a click opens that DAG ready to trigger with the values shown."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote, urlencode


@dataclass(frozen=True)
class Action:
    """One action: a label, the DAG it runs and the `conf` to trigger it with."""

    label: str
    dag_id: str
    conf: dict[str, Any] = field(default_factory=dict)
    backfill: bool = False

    @property
    def url(self) -> str:
        """The DAG's page in the Airflow UI (relative to the UI's root), the run configuration in
        the query string as `conf` JSON and one `key=value` per parameter, the form UIs that
        pre-fill the trigger dialog read. Airflow 3.3.2's UI has no route that opens the dialog
        pre-filled (added in apache/airflow#59231, reverted in #59769), so the cockpit also shows
        the JSON to paste into it."""
        query = {"conf": json.dumps(self.conf, sort_keys=True)} if self.conf else {}
        query.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in self.conf.items()
                      if v is not None})
        return f"dags/{quote(self.dag_id)}" + (f"?{urlencode(query)}" if query else "")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "url": self.url}


def for_pipeline(name: str, *, date_from: str | None = None, date_to: str | None = None) -> list[Action]:
    """Stop, restart, back-fill a date range and a checkpoint action (dry run first) of `name`."""
    return [
        Action("stop", f"{name}_stop", {"reason": ""}),
        Action("restart", f"{name}_restart", {"reason": "", "mode": "restart"}),
        Action("back-fill", f"{name}_backfill",
               {"from_date": date_from, "to_date": date_to}, backfill=True),
        Action("checkpoint: validate", f"{name}_checkpoint", {"action": "validate", "dry_run": True}),
        Action("checkpoint: backup", f"{name}_checkpoint", {"action": "backup", "reason": ""}),
    ]
