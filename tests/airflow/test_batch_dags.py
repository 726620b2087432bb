"""The batch DAGs of a pipeline run end to end with Airflow's own `DAG.test()` (a real metadata DB,
real task runs, XCom) on real data: `P_checkpoint` inspects, validates and backs up,
`P_checkpoint_backup` backs up and prunes, `P_restart` restores a backup when confirmed through
its Param, `P_maintenance` compacts every table keeping its data, `P_dq` stores its results
and fails (with an alert) when silver lost rows, `P_backfill` emits an asset event per table it
replaced with its dates, and the analyst DAG on gold summarises gold's newest windows. The DQ and
checkpoint tasks start no JVM in the Airflow process: their Spark work is a submitted `weir` job."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import catalog, stream
from spark_jobs.control import eventlog
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.airflow.supervision_harness import LOCAL_MASTER
from tests.helpers import assert_exactly_once, live_files, table
from tests.integration.pipelines import playback
from tests.support.approvals import respond, run_answered

# `DAG.test()` runs tasks under Airflow's SIGALRM timeout, which cancels pytest-timeout's alarm:
# only the thread method still ends a hung test (it ends the worker; xdist reports the test failed).
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(900, method="thread")]
P = "playback"
DAY_1 = dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)
DAY_2 = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Fed:
    """A WEIR_HOME that the playback stream has filled, and what it was fed."""

    home: WeirHome
    event_ids: set[str]
    batches: int

    @property
    def tables(self) -> PipelineTables:
        return PipelineTables.of(self.home, catalog.load(P))


@pytest.fixture(scope="module")
def fed(spark, tmp_path_factory: pytest.TempPathFactory, airflow_db: None) -> Iterator[Fed]:
    """Two event dates landed in four files and streamed two files per micro-batch, each batch
    touching both dates, so silver and gold hold several small files per partition (what
    maintenance is for)."""
    root = tmp_path_factory.mktemp("weir-batch-dags")
    home = WeirHome(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIR_HOME", str(root))
        patch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_MASTER)
        days = [generate(home.landing(P), files=2, sessions_per_file=4, seed=seed, prefix="d", start=start)
                for seed, start in ((31, DAY_1), (32, DAY_2))]
        landed_at = time.time() - 60
        interleaved = [f for pair in zip(days[0].files, days[1].files, strict=True) for f in pair]
        for order, path in enumerate(interleaved):
            os.utime(path, (landed_at + order, landed_at + order))  # read in this order
        stream.run(playback(files_per_trigger=2), once=True, home=home, spark=spark)
        yield Fed(home, days[0].event_ids | days[1].event_ids, batches=2)


def dags() -> dict[str, Any]:
    from weir_airflow.dag_factory import pipeline_dags

    return pipeline_dags(P)


def run_dag(dag_id: str, **kwargs: Any) -> Any:
    """`DAG.test()` of one of the pipeline's DAGs; the finished DagRun."""
    run = dags()[dag_id].test(**kwargs)
    return run


def task_states(run: Any) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def returned(run: Any, task_id: str) -> Any:
    """What a task of the run returned (its `return_value` XCom)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id,
                                                 key="return_value")).first()
        assert row is not None, f"{run.dag_id}.{task_id} returned nothing"
        return XComModel.deserialize_value(row)


def events(home: WeirHome, action: str) -> list[dict[str, Any]]:
    return [e for e in eventlog.read(home, P) if e["action"] == action]


def file_count(spark, path: Path) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, str(path)).detail().first()["numFiles"])


def test_checkpoint_dags_inspect_validate_and_back_up(fed: Fed) -> None:
    inspected = run_dag(f"{P}_checkpoint", run_conf={"action": "inspect"})
    assert inspected.state == "success", task_states(inspected)
    queries = returned(inspected, "checkpoint")["queries"]
    assert queries["ingest"]["last_committed_batch"] == fed.batches - 1, queries["ingest"]
    assert queries["gold"]["last_committed_batch"] is not None and queries["gold"]["state_operators"]

    validated = run_dag(f"{P}_checkpoint", run_conf={"action": "validate"})
    assert validated.state == "success", task_states(validated)
    verdict = returned(validated, "checkpoint")
    assert verdict["healthy"] is True and not [p for p in verdict.get("problems", [])
                                               if p.get("severity") == "error"], verdict

    backed_up = run_dag(f"{P}_checkpoint", run_conf={"action": "backup", "reason": "before a deploy"})
    assert backed_up.state == "success", task_states(backed_up)
    backup_id = returned(backed_up, "checkpoint")["id"]
    assert backup_id and (fed.home.backups(P) / backup_id).is_dir()

    periodic = run_dag(f"{P}_checkpoint_backup")
    assert periodic.state == "success", task_states(periodic)
    second_id = returned(periodic, "backup")["id"]
    pruned = returned(periodic, "prune")
    assert second_id != backup_id and {backup_id, second_id} <= set(pruned["kept"]), pruned
    assert not pruned["removed"]
    listed = {b.name for b in fed.home.backups(P).iterdir() if b.is_dir()}
    assert {backup_id, second_id} <= listed, listed
    logged = [(e["outcome"], e["actor"], e["reason"]) for e in events(fed.home, "checkpoint backup")]
    assert ("ok", "dag_test", "before a deploy") in logged, logged
    assert ("ok", "airflow", "periodic backup") in logged, logged

    # The on-call restart from a backup, once approved: the checkpoint is restored, the reason
    # logged, and a new P_stream run requested.
    restarted, _ = run_answered(
        f"{P}_restart", lambda dag, seen: respond(dag, "Approve", "restore INC-7", "oncall", seen),
        reason="INC-7: bad offsets", mode="restore_backup", backup_id=backup_id)
    assert restarted.state == "success", task_states(restarted)
    assert returned(restarted, "restart")["checkpoint"]["plan"], returned(restarted, "restart")
    restores = [(e["outcome"], e["reason"]) for e in events(fed.home, "checkpoint restore")]
    assert ("ok", "INC-7: bad offsets") in restores, restores
    [requested] = [e for e in events(fed.home, "restart") if e["outcome"] == "requested"]
    assert (requested["reason"], requested["details"]["mode"]) == ("INC-7: bad offsets", "restore_backup")


def test_maintenance_dag_compacts_every_table_keeping_its_data(fed: Fed, spark) -> None:
    from pyspark.testing import assertDataFrameEqual

    outputs = {layer: path for layer, path in fed.tables.outputs().items()
               if table(spark, path).limit(1).count()}
    assert {"bronze", "silver", "gold", "sessions"} <= set(outputs), outputs
    before = {layer: (file_count(spark, path), table(spark, path).collect())
              for layer, path in outputs.items()}
    partitions = {layer: len(partition_values(spark, path)) for layer, path in outputs.items()}
    assert before["bronze"][0] > partitions["bronze"] and before["silver"][0] > partitions["silver"], \
        "bronze and silver should start with several files per partition"
    # bronze is compacted a date per file (`layers.one_value_per_file`): a file per partition and
    # event_date_hint, at most
    partitions["bronze"] = table(spark, outputs["bronze"]).select("ingest_date", "event_date_hint") \
        .distinct().count()

    run = run_dag(f"{P}_maintenance")
    assert run.state == "success", task_states(run)

    after = {layer: file_count(spark, path) for layer, path in outputs.items()}
    for layer, path in outputs.items():
        files_before, rows_before = before[layer]
        assert after[layer] <= min(files_before, partitions[layer]), f"{layer} was not compacted: {after}"
        assertDataFrameEqual(table(spark, path), rows_before, checkRowOrder=False)
    assert_exactly_once(table(spark, fed.tables.silver), ["event_id"], fed.event_ids, "silver")
    [logged] = events(fed.home, "maintenance")
    assert logged["outcome"] == "ok" and logged["actor"] == "dag_test", logged
    for layer in outputs:
        done = logged["details"][layer]
        assert done["files_removed"] - done["files_added"] == before[layer][0] - after[layer], logged
        assert done["retain_hours"] >= 168, logged
    assert logged["details"]["bronze"]["sorted_by"] == ["event_date_hint", "source", "position"], logged
    assert all(f["min.event_date_hint"] == f["max.event_date_hint"] for f in live_files(outputs["bronze"]))


def partition_values(spark, path: Path) -> set[str]:
    from delta.tables import DeltaTable

    [column] = DeltaTable.forPath(spark, str(path)).detail().first()["partitionColumns"]
    return {row[0] for row in table(spark, path).select(column).distinct().collect()}


def dq_rows(home: WeirHome, run_id: str) -> list[dict[str, Any]]:
    from spark_jobs.control import platform_tables
    from spark_jobs.quality import results

    return platform_tables.read(results.table_path(home), equals={"run_id": run_id})


def test_dq_dag_stores_its_results_and_fails_with_an_alert_when_silver_lost_rows(fed: Fed, spark) -> None:
    run = run_dag(f"{P}_dq", logical_date=DAY_2)
    assert run.state == "success", task_states(run)
    report = returned(run, "dq")
    assert report["success"] is True
    assert (report["date_from"], report["date_to"]) == ("2026-11-19", "2026-11-20"), report
    rows = dq_rows(fed.home, report["run_id"])
    assert rows and all(r["run_success"] for r in rows)
    assert {r["table"] for r in rows} == {"silver.playback_events", "gold.playback_qoe_1m",
                                          "gold.playback_sessions"}
    [row_count] = [r for r in rows if r["expectation_type"] == "expect_table_row_count_to_equal"]
    assert row_count["success"] and json.loads(row_count["observed_value"]) == len(fed.event_ids)

    # Silver loses rows of one date: the scheduled check fails, says why, and alerts.
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, str(fed.tables.silver)).delete("event_date = '2026-11-20' AND "
                                                             "event_type = 'heartbeat'")
    failed = run_dag(f"{P}_dq", logical_date=DAY_2 + dt.timedelta(hours=1))
    assert failed.state == "failed" and task_states(failed) == {"dq": "failed"}
    outcomes = [e["outcome"] for e in events(fed.home, "dq")]
    assert outcomes == ["success", "failed"], outcomes
    latest = events(fed.home, "dq")[-1]
    failed_rows = [r for r in dq_rows(fed.home, latest["details"]["run_id"]) if not r["success"]]
    assert [r["expectation_type"] for r in failed_rows] == ["expect_table_row_count_to_equal"], failed_rows
    alerts = [json.loads(line) for line in (fed.home.logs / "alerts.jsonl").read_text().splitlines()]
    assert any(a["dag_id"] == f"{P}_dq" and "expect_table_row_count_to_equal" in (a["error"] or "")
               for a in alerts), alerts


def asset_events(run: Any) -> dict[str, dict[str, Any]]:
    """The asset events the tasks of `run` emitted: asset name → the event's extra."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.name, AssetEvent.extra).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)).all()
    emitted = [name for name, _ in rows]
    assert len(emitted) == len(set(emitted)), f"an asset got several events: {emitted}"
    return {name: extra for name, extra in rows}


def test_backfill_dag_emits_an_asset_event_per_replaced_table_with_its_dates(fed: Fed) -> None:
    day = "2026-11-20"
    run = run_dag(f"{P}_backfill", run_conf={"date": day})
    assert run.state == "success", task_states(run)
    emitted = asset_events(run)
    outlets = {"silver": "silver.playback_events", "quarantine": "quarantine.playback_events",
               "gold": "gold.playback_qoe_1m", "sessions": "gold.playback_sessions"}
    assert sorted(emitted) == sorted(outlets.values())
    [logged] = [e for e in events(fed.home, "backfill") if e["details"]["from"] == day]
    for layer, name in outlets.items():
        extra = emitted[name]
        assert (extra["pipeline"], extra["from"], extra["to"]) == (P, day, day), extra
        assert extra["changed"] is logged["details"][f"{layer}_replaced"], (extra, logged)
        assert extra["bronze_version"] == logged["details"]["bronze_version"], (extra, logged)


def test_analyst_dag_summarises_the_newest_gold_windows_without_spark(fed: Fed, spark) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    bag = DagBag(dag_folder=str(REPO / "dags" / "playback_gold_summary.py"))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags["playback_gold_summary"].test()
    assert run.state == "success", task_states(run)
    summary = returned(run, "summarise")

    gold = table(spark, fed.tables.gold)
    newest = gold.agg(F.max("window_end")).first()[0]
    recent = gold.where(F.col("window_end") > newest - dt.timedelta(minutes=15))
    expected = recent.agg(F.count("*"), F.sum("events"), F.sum("plays"), F.sum("errors")).first()
    got = (summary["rows"], summary["events"], summary["plays"], summary["errors"])
    assert got == tuple(expected), summary
    assert summary["rows"] > 0 and summary["windows"] == recent.select("window_start").distinct().count()
    version = DeltaTable.forPath(spark, str(fed.tables.gold)).history(1).first()["version"]
    assert summary["version"] == version, summary


# Runs the DQ, checkpoint and restart DAGs and the deploy gate's Airflow check in a fresh
# interpreter (the test process holds the `spark` fixture's JVM), and reports whether that
# interpreter ever launched a Py4J gateway, i.e. a JVM.
TASK_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from spark_jobs import catalog
from spark_jobs.control.deploy_gate import admit
from spark_jobs.home import WeirHome
from weir_airflow.dag_factory import pipeline_dags

P = sys.argv[2]
dags = pipeline_dags(P)
states = {}
for dag_id, conf in (("dq", None), ("checkpoint", {"action": "inspect"}),
                     ("checkpoint", {"action": "backup"}),
                     ("restart", {"reason": "no JVM here", "mode": "restart"})):
    # (A restore or reset through P_restart waits for an approval: test_approvals.py runs it.)
    run = dags[f"{P}_{dag_id}"].test(run_conf=conf)
    what = (conf or {}).get("action") or (conf or {}).get("mode") or ""
    states[f"{dag_id} {what}".strip()] = str(run.state)
# What the supervisor operator's deploy gate runs when the code changed: a submitted compat check.
# The fixture streamed with fewer shuffle partitions than the catalog's entry: the gate refuses.
from spark_jobs.control.deploy_gate import IncompatibleCodeError
from weir_airflow.tasks import submitted_compat_check
try:
    gate = admit(WeirHome.from_env(), catalog.load(P), actor="test", fingerprint="changed",
                 check=submitted_compat_check())
except IncompatibleCodeError as err:
    gate = {"refused": str(err)}
pyspark = sys.modules.get("pyspark")
gateway = getattr(getattr(pyspark, "SparkContext", None), "_gateway", None)
with open(sys.argv[3], "w") as out:   # not stdout: Spark and Airflow log there until exit
    json.dump({"states": states, "gate": gate, "jvm_started": gateway is not None}, out)
"""


@pytest.mark.timeout(1500, method="thread")  # five spark-submitted jobs, each a JVM start
def test_dq_checkpoint_restart_tasks_and_the_deploy_gate_start_no_jvm_in_the_airflow_process(
        fed: Fed, tmp_path: Path) -> None:
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    report = tmp_path / "task-process.json"
    out = subprocess.run([sys.executable, "-c", TASK_PROCESS, str(plugins), P, str(report)],
                         env=dict(os.environ), capture_output=True, text=True, timeout=850)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    seen = json.loads(report.read_text())
    assert seen["states"] == {"dq": "success", "checkpoint inspect": "success",
                              "checkpoint backup": "success", "restart restart": "success"}, seen
    assert "shuffle partitions" in seen["gate"].get("refused", ""), seen
    assert seen["jvm_started"] is False, seen
