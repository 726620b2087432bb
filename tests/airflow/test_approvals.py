"""Destructive actions wait for a person: `P_checkpoint` (reset here) and `P_refresh` first show
their dry-run plan, then park in Airflow's human-in-the-loop approval, run with Airflow's own
`DAG.test()` on real data. The approval is answered the way Airflow's HITL REST endpoint does it
(response written to `hitl_detail`, the parked task resumed with `handle_event_submit`), a timeout
the way the scheduler's `check_awaiting_input_timeouts` sweep does it (the sweep itself is run).
A rejection and a timeout change no table version and no checkpoint file; an approval runs the
refresh exactly once, with who approved and why in the event log."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs import catalog, stream
from spark_jobs.checkpoints import backups
from spark_jobs.control import eventlog
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.helpers import assert_exactly_once, table
from tests.integration.pipelines import playback
from tests.support.approvals import respond, run_answered, time_out

# `DAG.test()` runs tasks under Airflow's SIGALRM timeout, which cancels pytest-timeout's alarm:
# only the thread method still ends a hung test (it ends the worker; xdist reports the test failed).
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.timeout(900, method="thread")]
P = "playback"
START = dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory: pytest.TempPathFactory,
         airflow_db: None) -> Iterator[tuple[WeirHome, set[str]]]:
    """A migrated Airflow DB and a WEIR_HOME the playback stream has filled once."""
    root = tmp_path_factory.mktemp("weir-approvals")
    weir = WeirHome(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIR_HOME", str(root))
        landed = generate(weir.landing(P), files=2, sessions_per_file=4, seed=41, prefix="a", start=START)
        stream.run(playback(files_per_trigger=1), once=True, home=weir, spark=spark)
        yield weir, landed.event_ids


def snapshot(home: WeirHome) -> tuple[dict, dict]:
    root = home.checkpoints(P)
    files = {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
             for f in sorted(root.rglob("*")) if f.is_file()}
    return backups.table_versions(home, catalog.load(P)), files


def task_states(run: Any) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def events(home: WeirHome, action: str) -> list[dict[str, Any]]:
    return [e for e in eventlog.read(home, P) if e["action"] == action and e["outcome"] != "dry run"]


def test_a_rejected_or_timed_out_reset_changes_nothing_and_is_logged(home) -> None:
    weir, _ = home
    before = snapshot(weir)

    def reject(dag_id: str, seen: dict) -> None:
        respond(dag_id, "Reject", "not during peak", "bob", seen)

    run, seen = run_answered(f"{P}_checkpoint", reject, action="reset", reset_from="earliest",
                             reason="INC-21")
    states = task_states(run)
    assert states["plan"] == "success" and states["approve"] == "success", states
    assert states["checkpoint"] == "skipped", states
    assert "reset" in seen["subject"] and '"reset_from": "earliest"' in seen["body"], seen
    assert snapshot(weir) == before
    [rejected] = events(weir, "checkpoint reset")
    assert (rejected["outcome"], rejected["actor"], rejected["reason"]) == ("rejected", "bob",
                                                                            "not during peak")

    run, seen = run_answered(f"{P}_checkpoint", time_out, action="reset", reset_from="earliest",
                             reason="INC-22")
    states = task_states(run)
    assert states["approve"] == "failed" and states["checkpoint"] == "upstream_failed", states
    assert snapshot(weir) == before
    assert [e["outcome"] for e in events(weir, "checkpoint reset")] == ["rejected", "timed out"]


def test_an_approved_refresh_runs_once_with_the_approver_in_the_event_log(home, spark) -> None:
    weir, event_ids = home
    tables = PipelineTables.of(weir, catalog.load(P))
    silver_version = backups.table_versions(weir, catalog.load(P))["silver"]

    run, seen = run_answered(f"{P}_refresh", lambda d, s: respond(d, "Approve", "schema v2", "alice", s),
                             origin="bronze", reason="INC-23 new measure")
    assert run.state == "success", task_states(run)
    assert '"origin": "bronze"' in seen["body"] and "silver" in seen["body"], seen
    assert_exactly_once(table(spark, tables.silver), ["event_id"], event_ids, "silver")
    assert backups.table_versions(weir, catalog.load(P))["silver"] > silver_version
    [done] = events(weir, "refresh")
    assert (done["outcome"], done["actor"], done["reason"]) == ("ok", "dag_test", "INC-23 new measure")
    approval = done["details"]["approval"]
    assert (approval["decision"], approval["by"], approval["reason"]) == ("Approve", "alice", "schema v2")


def test_a_restart_that_resets_waits_for_approval_rejected_it_changes_nothing(home) -> None:
    """`P_restart` in a rewriting mode: plan, approval, then stop + reset + deploy. A rejection
    stops nothing and rewrites nothing; an approval runs the reset with the approver in its event.
    (Runs last in this module: the approved reset starts a new checkpoint generation.)"""
    weir, _ = home
    before = snapshot(weir)

    run, seen = run_answered(f"{P}_restart", lambda d, s: respond(d, "Reject", "wrong day", "bob", s),
                             mode="reset", reset_from="earliest", reason="INC-24 lost offsets")
    states = task_states(run)
    assert (states["route"], states["plan"], states["approve"]) == ("success",) * 3, states
    assert (states["restart"], states["deploy"]) == ("skipped", "skipped"), states
    assert "reset" in seen["subject"] and '"reset_from": "earliest"' in seen["body"], seen
    assert snapshot(weir) == before
    [rejected] = events(weir, "restart reset")
    assert (rejected["outcome"], rejected["actor"], rejected["reason"]) == ("rejected", "bob", "wrong day")
    assert not events(weir, "restart") and not events(weir, "stop"), "a rejected restart stops nothing"

    run, seen = run_answered(f"{P}_restart", lambda d, s: respond(d, "Approve", "offsets gone", "alice", s),
                             mode="reset", reset_from="earliest", reason="INC-25 lost offsets")
    assert run.state == "success", task_states(run)
    [reset] = events(weir, "checkpoint reset")[-1:]
    assert (reset["outcome"], reset["reason"]) == ("ok", "INC-25 lost offsets"), reset
    approval = reset["details"]["approval"]
    assert (approval["decision"], approval["by"], approval["reason"]) == ("Approve", "alice", "offsets gone")
    [restarted] = events(weir, "restart")
    assert restarted["details"]["mode"] == "reset" and restarted["details"]["checkpoint"]["generation"] > 0
    assert snapshot(weir)[1] != before[1], "the approved reset installed a new checkpoint generation"
