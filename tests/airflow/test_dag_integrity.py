"""DAG integrity: every DAG file imports without errors in well under a second, does no I/O and no
heavy import at parse time, and declares each catalog pipeline's DAGs with owners, tags, alerting
and the on-call Params."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs import catalog

pytestmark = pytest.mark.airflow
REPO = Path(__file__).resolve().parents[2]
KINDS = ("stream", "stop", "restart", "backfill", "dq", "checkpoint", "checkpoint_backup", "maintenance",
         "refresh")

# Runs in a fresh interpreter: parse the DAG folder with Airflow's own DagBag, time each file,
# and report which heavy modules got imported and whether WEIR_HOME was touched.
PARSE = r"""
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
stats = {s.file: s.duration.total_seconds() for s in bag.dagbag_stats}
heavy = sorted(m for m in ("pyspark", "delta", "great_expectations", "deltalake", "pandas")
               if m in sys.modules)
def asset(a):
    return {"name": a.name, "uri": a.uri, "extra": a.extra,
            "watchers": [[w.name, *w.trigger.serialize()] for w in a.watchers]}
dags = {}
for dag_id, dag in bag.dags.items():
    condition = dag.timetable.asset_condition
    dags[dag_id] = {
        "tasks": sorted(dag.task_ids), "tags": sorted(dag.tags), "owner": dag.owner,
        "params": {k: v.value if not hasattr(v, "dump") else v.dump() for k, v in dag.params.items()},
        "max_active_runs": dag.max_active_runs,
        "callbacks": [bool(t.on_failure_callback) for t in dag.tasks],
        "retries": {t.task_id: [t.retries, t.retry_delay.total_seconds()] for t in dag.tasks},
        "schedule_assets": [asset(a) for a in getattr(condition, "objects", [])],
        "inlets": {t.task_id: [asset(a) for a in t.inlets] for t in dag.tasks if t.inlets},
        "outlets": {t.task_id: [asset(a) for a in t.outlets] for t in dag.tasks if t.outlets},
    }
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "stats": stats,
                  "heavy": heavy, "dags": dags}, default=str))
"""


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    weir_home = tmp_path_factory.mktemp("untouched")
    airflow_home = tmp_path_factory.mktemp("airflow")
    env = {**os.environ, "WEIR_HOME": str(weir_home), "AIRFLOW_HOME": str(airflow_home),
           "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", PARSE, str(REPO / "dags")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["weir_home_entries"] = sorted(p.name for p in weir_home.iterdir())
    result["weir_home"] = str(weir_home)
    return result


def test_dag_files_import_without_errors(parsed: dict) -> None:
    assert parsed["errors"] == {}
    assert parsed["stats"], "no DAG file parsed"


def test_parsing_does_no_io_and_no_heavy_imports(parsed: dict) -> None:
    assert parsed["heavy"] == [], f"heavy modules imported at parse time: {parsed['heavy']}"
    assert parsed["weir_home_entries"] == [], "parsing the DAGs wrote under WEIR_HOME"


def test_every_pipeline_has_its_dags_with_owner_tags_and_alerts(parsed: dict) -> None:
    dags = parsed["dags"]
    for name in catalog.names():
        for kind in KINDS:
            dag = dags.get(f"{name}_{kind}")
            assert dag is not None, f"missing DAG {name}_{kind}"
            assert "weir" in dag["tags"] and name in dag["tags"]
            assert dag["owner"] == catalog.load(name).owner
            assert all(dag["callbacks"]), f"{name}_{kind}: a task without failure alert"
        assert dags[f"{name}_stream"]["max_active_runs"] == 1
        assert dags[f"{name}_backfill"]["tasks"] == ["backfill", "dq"]
        assert dags[f"{name}_checkpoint_backup"]["tasks"] == ["backup", "prune"]
        assert dags[f"{name}_restart"]["tasks"] == ["approve", "deploy", "plan", "restart", "route"]
        assert dags[f"{name}_checkpoint"]["tasks"] == ["approve", "checkpoint", "plan", "route"]
        assert dags[f"{name}_refresh"]["tasks"] == ["approve", "plan", "refresh"]
        # An approval Airflow fails after it was answered asks again, soon (weir_airflow.approval).
        for kind in ("restart", "checkpoint", "refresh"):
            assert dags[f"{name}_{kind}"]["retries"]["approve"] == [1, 5.0], kind


def test_on_call_params(parsed: dict) -> None:
    restart = parsed["dags"]["playback_restart"]["params"]
    assert restart["reason"]["schema"]["minLength"] >= 1 and restart["reason"]["value"] is None
    assert restart["mode"]["schema"]["enum"] == ["restart", "restore_backup", "reset"]
    # The approval of the plan replaced the `confirm` Param of the destructive actions.
    assert set(restart) == {"reason", "mode", "backup_id", "reset_from"}
    checkpoint = parsed["dags"]["playback_checkpoint"]["params"]
    assert set(checkpoint) == {"action", "backup_id", "reset_from", "keep", "dry_run", "reason"}
    assert set(checkpoint["action"]["schema"]["enum"]) == {
        "inspect", "validate", "backup", "backups", "restore", "rewind", "reset", "prune", "compat"}
    refresh = parsed["dags"]["playback_refresh"]["params"]
    assert refresh["origin"]["schema"]["enum"] == ["bronze", "source"]
    assert refresh["origin"]["value"] == "bronze"
    assert refresh["reason"]["schema"]["minLength"] >= 1 and refresh["reason"]["value"] is None


def every_asset(parsed: dict) -> list[dict]:
    """Every asset any DAG mentions (schedule, inlets, outlets), once per mention."""
    return [a for dag in parsed["dags"].values()
            for a in (dag["schedule_assets"] + [a for assets in dag["inlets"].values() for a in assets]
                      + [a for assets in dag["outlets"].values() for a in assets])]


def test_every_table_is_an_asset_named_by_layer_with_its_location_and_commit_watcher(parsed: dict) -> None:
    from spark_jobs.home import WeirHome
    from spark_jobs.layers import PipelineTables

    declared = {a["name"]: a for a in every_asset(parsed)}
    home = WeirHome(Path(parsed["weir_home"]))
    for name in catalog.names():
        pipeline = catalog.load(name)
        tables = PipelineTables.of(home, pipeline).named()
        expected = {"bronze", "silver", "quarantine", "gold", *(["sessions"] if pipeline.sessions else []),
                    *(["dim"] if pipeline.dimension else [])}
        assert set(tables) == expected, (name, set(tables))
        for key, path in tables.items():
            layer = path.parent.name    # the session table's layer is gold, its folder
            assert layer == (key if key != "sessions" else "gold"), (key, path)
            asset = declared.get(f"{layer}.{path.name}")
            assert asset is not None, f"{name}: no asset for {key} table {path}"
            assert asset["uri"] == f"weir://{layer}/{path.name}" and asset["extra"]["layer"] == layer, asset
            interval = (catalog.DEFAULT_ASSET_EVENT_INTERVAL_S if key == "dim"
                        else pipeline.asset_event_interval_s)
            assert asset["watchers"] == [[f"{layer}.{path.name}.commits",
                                          "weir_airflow.delta_watch.DeltaCommitTrigger",
                                          {"table_uri": str(path), "asset_name": f"{layer}.{path.name}",
                                           "interval_s": interval}]], asset
    assert declared["gold.playback_sessions"]["uri"] == "weir://gold/playback_sessions"
    # Airflow keeps one watcher per asset only if every DAG declares the asset identically.
    for mention in every_asset(parsed):
        assert mention == declared[mention["name"]], f"{mention['name']} declared differently"


def test_backfill_reads_bronze_and_dimension_and_emits_silver_quarantine_gold_sessions(parsed: dict) -> None:
    assert catalog.load("playback").sessions is not None
    for name in catalog.names():
        pipeline = catalog.load(name)
        backfill = parsed["dags"][f"{name}_backfill"]
        sessions = [f"gold.{pipeline.sessions.table}"] if pipeline.sessions else []
        assert [a["name"] for a in backfill["outlets"]["backfill"]] == [
            f"silver.{pipeline.events_table}", f"quarantine.{pipeline.events_table}",
            f"gold.{pipeline.gold_table}", *sessions]
        dim = [f"dim.{pipeline.dimension.table}"] if pipeline.dimension else []
        inlets = [a["name"] for a in backfill["inlets"]["backfill"]]
        assert inlets == [f"bronze.{pipeline.events_table}", *dim]


def test_analyst_dag_is_scheduled_on_the_playback_gold_asset(parsed: dict) -> None:
    summary = parsed["dags"]["playback_gold_summary"]
    [gold] = summary["schedule_assets"]
    assert gold["name"] == "gold.playback_qoe_1m"
    assert gold["uri"] == "weir://gold/playback_qoe_1m"
    assert summary["tasks"] == ["summarise"] and summary["max_active_runs"] == 1
