"""The supervisor's decisions, as pure functions of what it observed: no Airflow, no Spark, no
files — adopt a live driver, launch (cleaning up a dead one first), back off, give up when the
restart budget is spent, finish when stopped on purpose; and the budget counted from the event log."""

from __future__ import annotations

import datetime as dt

from spark_jobs.catalog import RestartPolicy
from spark_jobs.control.lease import iso
from spark_jobs.control.supervisor import (
    Adopt,
    Finish,
    GiveUp,
    Launch,
    Observation,
    Restart,
    automatic_restarts,
    decide_after_loss,
    decide_relaunch,
    decide_start,
)

NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
POLICY = RestartPolicy(initial_backoff_s=2, max_backoff_s=10, max_restarts=3, window_s=600)


def seen(**facts: object) -> Observation:
    return Observation("playback", now=NOW, **facts)  # type: ignore[arg-type]


def ago(seconds: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds)).isoformat()


def test_a_live_driver_is_adopted_never_doubled() -> None:
    assert decide_start(seen(holder_pid=41)) == Adopt(41)
    assert decide_start(seen(starting_pid=40)) == Adopt(40)          # launched, lease not taken yet
    assert decide_relaunch(seen(holder_pid=41)) == Adopt(41)


def test_nothing_running_launches_and_a_dead_holder_is_cleaned_up_first() -> None:
    assert decide_start(seen()) == Launch(clean_up_first=False)
    assert decide_start(seen(lease_left=True)) == Launch(clean_up_first=True)
    # a launch still alive beside a dead holder's lease is that holder's lingering JVM: clean up
    assert decide_start(seen(starting_pid=40, lease_left=True)) == Launch(clean_up_first=True)


def test_a_lost_driver_is_restarted_with_a_growing_backoff() -> None:
    assert decide_after_loss(seen(), "dead", "gone", POLICY) == Restart("dead", "gone", 2, 1)
    again = decide_after_loss(seen(restarts=(ago(30),)), "stalled", "x", POLICY)
    assert again == Restart("stalled", "x", 4, 2)


def test_the_spent_budget_gives_up_and_a_stop_finishes() -> None:
    spent = (ago(300), ago(200), ago(100))
    decision = decide_after_loss(seen(restarts=spent), "dead", "gone", POLICY)
    assert isinstance(decision, GiveUp) and "budget is spent: 3 restarts" in decision.message
    # restarts older than the window no longer count
    assert isinstance(decide_after_loss(seen(restarts=(ago(900), *spent[1:])), "dead", "", POLICY), Restart)
    assert isinstance(decide_after_loss(seen(restarts=spent), "stopped", "by alice", POLICY), Finish)
    assert isinstance(decide_relaunch(seen(stopped=True, holder_pid=41)), Finish)


def test_restarts_are_counted_from_the_event_log_since_the_last_fresh_deploy() -> None:
    def event(action: str, seconds: float, **details: object) -> dict:
        return {"action": action, "event_time": NOW - dt.timedelta(seconds=seconds), "details": details}

    log = [event("deploy", 500, fresh=True), event("restart", 400, automatic=True),
           event("deploy", 300, fresh=True),                       # a new deploy: a new budget
           event("restart", 200, automatic=True), event("adopt", 100, automatic=True, after="restart"),
           event("deploy", 50, fresh=False),                       # a retry of the task: same budget
           event("restart", 40), event("dq", 30)]                  # on-call and others do not count
    assert automatic_restarts(log) == tuple(iso(NOW - dt.timedelta(seconds=s)) for s in (200, 100))
