"""`weir stop` reports a graceful stop only when it saw the driver end; every stop is in the event
log once, whoever asked."""

from __future__ import annotations

from spark_jobs import cli
from spark_jobs.control import eventlog
from spark_jobs.control import lease as leases
from spark_jobs.control.stop import stop_driver
from spark_jobs.home import WeirHome
from tests.support.leases import plant_lease


def remote_holder(home: WeirHome) -> leases.LeaseRecord:
    """A fresh lease held by a driver on another host: no signal and no /proc reach it."""
    now = leases.iso(leases.now_utc())
    record = leases.LeaseRecord("playback", 4242, "another-host.example", None, "remote-token", now, 7, now)
    plant_lease(home, record)
    return record


def test_a_driver_it_could_not_see_end_is_not_reported_stopped(home: WeirHome) -> None:
    remote_holder(home)
    outcome = stop_driver(home, "playback", actor="tester", reason="test", graceful_timeout_s=1.0)
    assert (outcome.outcome, outcome.driver_pid) == ("unconfirmed", 4242)
    assert cli.main(["stop", "playback", "--timeout", "1"]) == 1
    stops = [(e["outcome"], e["actor"]) for e in eventlog.read(home, "playback") if e["action"] == "stop"]
    assert stops == [("unconfirmed", "tester"), ("unconfirmed", eventlog.default_actor())]


def test_a_remote_driver_that_gives_its_lease_back_stopped_gracefully(home: WeirHome) -> None:
    import threading

    record = remote_holder(home)

    def remote_driver_obeys() -> None:  # the remote driver sees the stop request and releases
        request = leases.read_json(home.control("playback") / "stop-request.json")
        while request is None:
            request = leases.read_json(home.control("playback") / "stop-request.json")
        assert request["token"] == record.token
        plant_lease(home, None)

    obeying = threading.Thread(target=remote_driver_obeys)
    obeying.start()
    outcome = stop_driver(home, "playback", actor="tester", reason=None, graceful_timeout_s=30.0)
    obeying.join()
    assert outcome.outcome == "graceful"
    assert [e["outcome"] for e in eventlog.read(home, "playback") if e["action"] == "stop"] == ["graceful"]
