"""Table assets under a real Airflow (scheduler, dag-processor, triggerer, execution API as separate
processes): every table of `playback` is registered as an asset; gold's watcher, started by the
triggerer because the analyst DAG is scheduled on gold, turns a commit into one asset event with
the new version, and that event runs `playback_gold_summary`, which summarises the new data; a
commit made while the triggerer is down fires once it is back (the watcher's asset state).

Gold is written here with `deltalake` (its real schema, two tiny commits), not by a stream: what is
under test is Airflow's side, and a Spark stream would add minutes on a shared machine. The catalog
entry is the real one with a 2-second event interval (a catalog setting), so the test is short."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.home import REPO_ROOT, WeirHome
from tests.airflow.airflow_services import AirflowServices
from tests.airflow.gold_table import GOLD_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(1200)]
DAG_ID = "playback_gold_summary"
INTERVAL_S = 2.0
STARTUP_S = 400
CATALOG = f'''"""playback as in conf/, with a short asset event interval (for the asset e2e test)."""
import dataclasses
import importlib.util

_spec = importlib.util.spec_from_file_location("weir_catalog_playback_base",
                                               {str(REPO_ROOT / "conf" / "pipelines" / "playback.py")!r})
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
PIPELINE = dataclasses.replace(_base.PIPELINE, asset_event_interval_s={INTERVAL_S})
'''


def gold_rows(minute: dt.datetime, errors: int) -> pa.Table:
    rows = [{"window_start": minute, "window_end": minute + dt.timedelta(minutes=1), "content_id": f"c{i}",
             "cdn": cdn, "events": 10, "plays": 2, "errors": errors, "rebuffer_ms": 100,
             "avg_bitrate_kbps": 2500.0, "sessions": 3, "event_date": minute.date()}
            for i, cdn in enumerate(("akamai", "fastly"))]
    return pa.Table.from_pylist(rows, schema=GOLD_SCHEMA)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServices]:
    root = tmp_path_factory.mktemp("assets-airflow")
    home = WeirHome(root / "weir")
    home.root.mkdir()
    conf = root / "conf"
    (conf / "pipelines").mkdir(parents=True)
    (conf / "pipelines" / "playback.py").write_text(CATALOG)
    airflow = AirflowServices(root / "airflow", home)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIR_HOME", str(home.root))
        patch.setenv("WEIR_CONF", str(conf))
        # Asset-triggered runs are made by the scheduler's DAG-run creation, which the shared
        # harness turns off; only the analyst DAG is unpaused here, so nothing else runs.
        airflow.env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "True"
        try:
            airflow.migrate()
            airflow.start("api-server", "scheduler", "dag-processor", "triggerer")
            yield airflow
        finally:
            airflow.stop_all()


def gold_path(home: WeirHome) -> Path:
    return home.table("gold", "playback_qoe_1m")


def test_a_gold_commit_becomes_one_asset_event_that_runs_the_analyst_dag(services: AirflowServices) -> None:
    gold = gold_path(services.home)
    minute = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)
    write_deltalake(str(gold), gold_rows(minute, errors=0), partition_by=["event_date"])   # version 0
    services.ready([DAG_ID, "playback_backfill"], unpause=f"^{DAG_ID}$")

    assets = {r["name"]: r["uri"] for r in services.query("SELECT name, uri FROM asset")}
    for layer, table in (("bronze", "playback_events"), ("silver", "playback_events"),
                         ("quarantine", "playback_events"), ("gold", "playback_qoe_1m"),
                         ("dim", "content_catalog")):
        assert assets.get(f"{layer}.{table}") == f"weir://{layer}/{table}", assets

    def watcher_running() -> bool:
        rows = services.query("SELECT t.triggerer_id FROM trigger t "
                              "JOIN asset_watcher w ON w.trigger_id = t.id JOIN asset a ON a.id = w.asset_id "
                              "WHERE a.name = 'gold.playback_qoe_1m'")
        return bool(rows) and rows[0]["triggerer_id"] is not None

    services.wait_for("gold's watcher running in the triggerer", watcher_running, STARTUP_S)
    assert services.query("SELECT count(*) AS n FROM asset_event")[0]["n"] == 0

    def gold_events() -> list[dict]:
        return [json.loads(r["extra"]) for r in services.query(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = 'gold.playback_qoe_1m' ORDER BY e.id")]

    # The watcher takes the version it first sees as its start: commit until one is news to it
    # (a commit made before its first look is not).
    def committed_and_seen() -> list[dict] | None:
        if not gold_events():
            write_deltalake(str(gold), gold_rows(minute + dt.timedelta(minutes=1), errors=1), mode="append",
                            partition_by=["event_date"])
        return gold_events() or None

    services.wait_for("an asset event for a gold commit", committed_and_seen, 180, poll_s=5 * INTERVAL_S)
    version = DeltaTable(str(gold)).version()
    services.wait_for("the event for the newest commit",
                      lambda: gold_events()[-1]["payload"]["version"] == version, 60)
    events = gold_events()
    for event in events:
        payload = event["payload"]
        assert event["from_trigger"] is True and payload["table"] == "gold.playback_qoe_1m", event
        assert payload["operation"] == "WRITE" and payload["commit_time"], event
    chain = [(e["payload"]["previous_version"], e["payload"]["version"]) for e in events]
    assert all(before < after for before, after in chain), chain
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chain)), chain

    runs = services.wait_runs_done(DAG_ID, 1, 300, run_type="asset_triggered")
    assert all(r["state"] == "success" for r in runs), runs
    summaries = [xcom_value(r["value"]) for r in services.query(
        "SELECT value FROM xcom WHERE dag_id = ? AND task_id = 'summarise' AND key = 'return_value' "
        "ORDER BY dag_run_id", DAG_ID)]
    assert summaries and summaries[-1]["version"] <= version, summaries
    # two rows with one error each per commit after the first, all in gold's newest 15 minutes
    assert all(s["errors"] == 2 * s["version"] for s in summaries), summaries

    # Nothing committed any more: a few more looks fire nothing.
    time.sleep(4 * INTERVAL_S)
    assert gold_events() == events

    # A commit while the triggerer is down fires once it is back: the watcher resumes from the
    # version kept in Airflow's asset state, not from what it sees first.
    services.kill("triggerer")
    write_deltalake(str(gold), gold_rows(minute + dt.timedelta(minutes=2), errors=1), mode="append",
                    partition_by=["event_date"])
    services.start("triggerer")
    newest = DeltaTable(str(gold)).version()
    services.wait_for("the commit made while the triggerer was down",
                      lambda: gold_events()[-1]["payload"]["version"] == newest, STARTUP_S)
    after = gold_events()[len(events):]
    assert [(e["payload"]["previous_version"], e["payload"]["version"]) for e in after] == [
        (version, newest)], after


def xcom_value(stored: str) -> dict:
    value = json.loads(stored)
    return json.loads(value) if isinstance(value, str) else value
