"""The on-call Params of `P_stop` and `P_restart` reach their operators rendered, with their
types: a template field the operator does not declare stays the literal "{{ params.x }}" text
(`P_stop` failed on its timeout that way, and `P_restart` could never confirm a restore, which
its approval step now does)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow
P = "playback"


def dags() -> dict:
    from weir_airflow.dag_factory import pipeline_dags

    return pipeline_dags(P)


def test_stop_params_reach_the_operator() -> None:
    stop = dags()[f"{P}_stop"].get_task("stop")
    stop.render_template_fields({"params": {"reason": "maintenance window", "graceful_timeout_s": 45}})
    assert (stop.reason, stop.graceful_timeout_s) == ("maintenance window", 45)


def test_restart_params_reach_the_operator() -> None:
    restart = dags()[f"{P}_restart"].get_task("restart")
    restart.render_template_fields({"params": {"reason": "INC-9", "mode": "reset", "backup_id": None,
                                               "reset_from": "latest"}})
    assert (restart.reason, restart.mode, restart.backup_id, restart.reset_from) == (
        "INC-9", "reset", None, "latest")
    # A restore or reset runs on the approval of its plan, not on a Param anyone can tick.
    assert restart.approval_task_id == "approve" and "confirm" not in dags()[f"{P}_restart"].params


def backfill_dates(infos: list) -> list[str]:
    """The event date each run of `P_backfill` reconciles, given the runs Airflow would create."""
    from weir_airflow.dag_factory import _run_date

    return [_run_date({"logical_date": info.logical_date, "data_interval_start": info.data_interval.start,
                       "data_interval_end": info.data_interval.end}) for info in infos]


def test_the_daily_backfill_reconciles_the_day_that_ended_and_backfill_create_the_dates_given() -> None:
    """Through Airflow's own (serialized, as the scheduler sees it) timetable: the midnight run of
    11-21 back-fills 11-20 (not the still-empty 11-21); `airflow backfill create --from-date
    2026-11-01 --to-date 2026-11-03` back-fills exactly those three dates; a manual trigger, the
    last complete day."""
    import datetime as dt

    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import DataInterval, TimeRestriction

    dag = DagSerialization.from_dict(DagSerialization.to_dict(dags()[f"{P}_backfill"]))
    utc = dt.UTC
    previous = DataInterval(dt.datetime(2026, 11, 19, tzinfo=utc), dt.datetime(2026, 11, 20, tzinfo=utc))
    scheduled = dag.timetable.next_dagrun_info(
        last_automated_data_interval=previous,
        restriction=TimeRestriction(dt.datetime(2026, 1, 1, tzinfo=utc), None, True))
    assert scheduled.run_after == dt.datetime(2026, 11, 21, tzinfo=utc)
    assert backfill_dates([scheduled]) == ["2026-11-20"]

    # What `airflow backfill create` iterates (airflow.models.backfill._get_info_list).
    infos = list(dag.iter_dagrun_infos_between(dt.datetime(2026, 11, 1, tzinfo=utc),
                                               dt.datetime(2026, 11, 3, tzinfo=utc)))
    assert backfill_dates(infos) == ["2026-11-01", "2026-11-02", "2026-11-03"]

    manual = dag.timetable.infer_manual_data_interval(run_after=pendulum.datetime(2026, 11, 21, 9, 30))
    assert backfill_dates([type(scheduled)(run_after=None, data_interval=manual)]) == ["2026-11-20"]


@pytest.mark.parametrize("action", ["inspect", "validate", "backup", "backups", "restore", "rewind", "reset",
                                    "prune", "compat"])
def test_checkpoint_params_become_a_weir_command_line_with_the_same_arguments(
        action: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`P_checkpoint` submits `weir checkpoint`: each Param reaches the action that takes it, a
    reason starting with a dash stays a reason, and the result file is accepted under WEIR_HOME."""
    from weir_airflow.dag_factory import CHECKPOINT_ACTIONS

    from spark_jobs.cli import build_parser
    from spark_jobs.commands.checkpoint import approval_of_args, command_line

    assert action in CHECKPOINT_ACTIONS
    monkeypatch.setenv("WEIR_HOME", str(tmp_path))
    argv = command_line(P, action, backup_id="20261120T090000Z", reset_from="latest", keep=3,
                        dry_run=True, confirm=True, reason="-INC-7: bad offsets", approval=APPROVAL)
    args = build_parser().parse_args([*argv, "--result-file", str(tmp_path / "result.json")])
    destructive = action in ("restore", "rewind", "reset", "prune")
    seen = {key: getattr(args, key, None) for key in ("backup_id", "reset_from", "keep", "dry_run", "yes",
                                                      "reason")}
    assert (args.command, args.action, args.pipeline, args.result_file) == (
        "checkpoint", action, P, tmp_path / "result.json")
    assert seen == {
        "backup_id": "20261120T090000Z" if action in ("restore", "rewind") else None,
        "reset_from": "latest" if action == "reset" else None,
        "keep": 3 if action == "prune" else None,
        "dry_run": True if destructive or action == "backup" else None,
        "yes": True if destructive else None,
        "reason": "-INC-7: bad offsets" if destructive or action == "backup" else None,
    }, seen
    assert approval_of_args(args) == (RECORDED if destructive else None)


# An approval as Airflow's approval step hands it over, and as the submitted command records it.
APPROVAL = {"decision": "Approve", "by": "-alice", "reason": "-ok: plan read", "at": "2026-11-23T22:00:00"}
RECORDED = {"decision": "Approve", "by": "-alice", "reason": "-ok: plan read"}


@pytest.mark.parametrize("origin", ["bronze", "source"])
def test_refresh_params_and_the_approval_become_a_weir_command_line(
        origin: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`P_refresh` submits `weir refresh`: its plan as `--dry-run`, the approved refresh as `--yes`
    with who approved it and why, for the command's event log."""
    from spark_jobs.cli import build_parser
    from spark_jobs.commands.checkpoint import approval_of_args
    from spark_jobs.commands.refresh import command_line

    monkeypatch.setenv("WEIR_HOME", str(tmp_path))
    for dry_run, approval in ((True, None), (False, APPROVAL)):
        argv = command_line(P, origin, dry_run=dry_run, reason="-INC-8", approval=approval)
        args = build_parser().parse_args([*argv, "--result-file", str(tmp_path / "r.json")])
        assert (args.command, args.pipeline, args.origin, args.dry_run, args.yes, args.reason) == (
            "refresh", P, origin, dry_run, not dry_run, "-INC-8")
        assert approval_of_args(args) == (RECORDED if approval else None)
