"""The alert sink: `WEIR_HOME/logs/alerts.jsonl`, one JSON line per alert, where a pager
integration (or `tail -f`) picks it up. Airflow's failure callback and the freshness deadline
both send here."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


def sink(home: WeirHome) -> Path:
    return home.logs / "alerts.jsonl"


def send(home: WeirHome, alert: dict[str, Any]) -> None:
    """Append `alert` (stamped `at` when it has no time) to the sink."""
    alert = {"at": dt.datetime.now(dt.UTC).isoformat(), **alert}
    home.logs.mkdir(parents=True, exist_ok=True)
    with open(sink(home), "a", encoding="utf-8") as out:
        out.write(json.dumps(alert, default=str) + "\n")
    log.error("ALERT %s: %s", alert.get("pipeline"), alert.get("error"))
