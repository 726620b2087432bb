"""Every Delta table of a pipeline as an Airflow Asset, so DAGs can be scheduled on data landing.

An asset is named `<layer>.<table>` (as the DQ results name tables: `gold.playback_qoe_1m`) and its
URI is `weir://<layer>/<table>`: the table's identity in the deployment, not its location, so
moving `WEIR_HOME` (or a test's own home beside another's in one Airflow database) never makes
Airflow see one name with two URIs, which it refuses as an inactive asset. Each carries an
`AssetWatcher` (`DeltaCommitTrigger`, given the table's location) that turns the stream's commits
into asset events, at most one per table per catalog-set interval; a back-fill emits its events
as task outlets, with the dates it re-derived in the event's extra. Declarations only: building
them does no I/O, so DAG files stay cheap to parse.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import Asset, AssetWatcher

from spark_jobs import catalog
from spark_jobs.catalog import DEFAULT_ASSET_EVENT_INTERVAL_S
from spark_jobs.control import eventlog
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from weir_airflow.delta_watch import DeltaCommitTrigger

log = logging.getLogger(__name__)
# The outputs a back-fill of a date range does not re-derive: bronze is its input.
BACKFILL_INPUTS = ("bronze",)


def asset_name(layer: str, table: str) -> str:
    return f"{layer}.{table}"


def asset_uri(layer: str, table: str) -> str:
    return f"weir://{layer}/{table}"


def pipeline_assets(name: str, home: WeirHome | None = None) -> dict[str, Asset]:
    """The assets of pipeline `name`'s tables, by key of `PipelineTables.named` (bronze, silver,
    quarantine, gold, sessions, dim); an asset's name and URI use the table's layer, its folder.

    Every DAG file that mentions a table gets the identical Asset (same watcher, same trigger
    arguments), which Airflow needs to keep one watcher per table. A dimension may be shared by
    pipelines (playback and playback_kafka join the same catalog), so its watcher uses the default
    interval rather than one pipeline's."""
    pipeline = catalog.load(name)
    tables = PipelineTables.of(home or WeirHome.from_env(), pipeline)
    assets = {}
    for key, path in tables.named().items():
        layer = PipelineTables.layer(path)
        label = asset_name(layer, path.name)
        interval = DEFAULT_ASSET_EVENT_INTERVAL_S if key == "dim" else pipeline.asset_event_interval_s
        trigger = DeltaCommitTrigger(table_uri=str(path), asset_name=label, interval_s=interval)
        assets[key] = Asset(name=label, uri=asset_uri(layer, path.name),
                              extra={"layer": layer, "format": "delta"},
                              watchers=[AssetWatcher(name=f"{label}.commits", trigger=trigger)])
    return assets


def backfill_layers(name: str, home: WeirHome | None = None) -> list[str]:
    """The keys of the tables a back-fill of a date range re-derives: the pipeline's outputs
    (`PipelineTables.outputs`) but its input, bronze."""
    tables = PipelineTables.of(home or WeirHome.from_env(), catalog.load(name))
    return [key for key in tables.outputs() if key not in BACKFILL_INPUTS]


def backfill_outlets(name: str) -> list[Asset]:
    """The outlets of a back-fill task: the tables whose partitions it replaces."""
    assets = pipeline_assets(name)
    return [assets[key] for key in backfill_layers(name)]


def backfill_inlets(name: str) -> list[Asset]:
    """The inlets of a back-fill task: what it reads (bronze, the dimension). With its outlets,
    every table of the pipeline is declared to Airflow, so each shows on the Assets page."""
    assets = pipeline_assets(name)
    outlets = backfill_layers(name)
    return [asset for key, asset in assets.items() if key not in outlets]


def annotate_backfill_events(outlet_events: Any, name: str, date_from: str, date_to: str,
                             started: dt.datetime, home: WeirHome | None = None) -> dict[str, dict]:
    """Put the back-filled dates into the extra of each outlet's asset event (`outlet_events` from
    the task context), with whether the back-fill changed that table, read from the event-log
    entry the back-fill job wrote at or after `started` (None when it cannot be found)."""

    home = home or WeirHome.from_env()
    try:
        entries = eventlog.read(home, name)
    except Exception as err:  # the back-fill itself succeeded: its events go out, less precise
        log.warning("%s back-fill %s..%s: event log unreadable (%s)", name, date_from, date_to, err)
        entries = []
    logged = [e for e in entries
              if e["action"] == "backfill" and e["outcome"] == "ok" and e["event_time"] >= started
              and (e.get("details") or {}).get("from") == date_from
              and (e.get("details") or {}).get("to") == date_to]
    details = logged[-1]["details"] if logged else {}
    if not logged:
        log.warning("%s back-fill %s..%s: no event-log entry since %s; asset events say changed=None",
                    name, date_from, date_to, started.isoformat())
    assets = pipeline_assets(name, home)
    extras = {}
    for layer in backfill_layers(name, home):
        extra = {"pipeline": name, "from": date_from, "to": date_to,
                 "changed": details.get(f"{layer}_replaced"),
                 "bronze_version": details.get("bronze_version")}
        outlet_events[assets[layer]].extra = extra
        extras[assets[layer].name] = extra
    log.info("%s back-fill %s..%s: asset events %s", name, date_from, date_to, extras)
    return extras
