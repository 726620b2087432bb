"""The lease: one live driver per pipeline; a dead holder's lease is taken over; two drivers
racing for it never both win."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from spark_jobs.control import lease as leases
from spark_jobs.control.lease import LeaseHeldError, LeaseLostError
from spark_jobs.home import WeirHome
from tests.support.leases import plant_lease

HOLD = """
import sys, time
from pathlib import Path
from spark_jobs.control import lease
from spark_jobs.home import WeirHome
try:
    held = lease.acquire(WeirHome(Path(sys.argv[1])), "playback")
except lease.LeaseHeldError:
    print("refused", flush=True)
    sys.exit(3)
print("acquired", flush=True)
time.sleep(float(sys.argv[2]))
held.release()
"""


def holder_process(home: WeirHome, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLD, str(home.root), str(seconds)],
                            stdout=subprocess.PIPE, text=True)


def test_a_live_holder_refuses_a_second_driver(home: WeirHome) -> None:
    first = holder_process(home, 30)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "acquired"
        with pytest.raises(LeaseHeldError, match=f"driver pid {first.pid}"):
            leases.acquire(home, "playback")
        assert leases.holder(home, "playback").pid == first.pid  # type: ignore[union-attr]
    finally:
        first.kill()
        first.wait()


def test_a_killed_holders_lease_is_taken_over(home: WeirHome) -> None:
    first = holder_process(home, 30)
    assert first.stdout is not None and first.stdout.readline().strip() == "acquired"
    first.kill()  # SIGKILL: no release
    first.wait()
    assert leases.read(home, "playback") is not None
    assert leases.holder(home, "playback") is None
    with leases.acquire(home, "playback") as mine:
        assert leases.holder(home, "playback").token == mine.token  # type: ignore[union-attr]
    assert leases.read(home, "playback") is None


def test_racing_drivers_never_both_win(home: WeirHome) -> None:
    racers = [holder_process(home, 3) for _ in range(6)]
    outputs = [r.communicate(timeout=60)[0].strip() for r in racers]
    codes = [r.returncode for r in racers]
    assert outputs.count("acquired") == 1, outputs
    assert sorted(codes) == [0] + [3] * 5


def test_a_recycled_pid_does_not_keep_a_lease_alive(home: WeirHome) -> None:
    first = holder_process(home, 30)
    assert first.stdout is not None and first.stdout.readline().strip() == "acquired"
    record = leases.read(home, "playback")
    assert record is not None
    first.kill()
    first.wait()
    # Rewrite the lease as if the pid were now some other live process (this one), started at
    # another time: the start-time check must see through it.
    import dataclasses
    import os

    fake = dataclasses.replace(record, pid=os.getpid(), start_ticks=(record.start_ticks or 0) + 1)
    plant_lease(home, fake)
    assert leases.holder(home, "playback") is None


FENCED_HOLDER = """
import sys, time
from pathlib import Path
from spark_jobs.control import lease
from spark_jobs.home import WeirHome
held = lease.acquire(WeirHome(Path(sys.argv[1])), "playback")
print("acquired", held.fencing_token, flush=True)
while True:
    try:
        lease.fence("playback")          # what the driver calls before each batch and commit
    except lease.LeaseLostError as err:
        print("fenced", err, flush=True)
        sys.exit(4)
    time.sleep(0.1)
"""


def test_a_paused_holder_is_taken_over_and_fenced(home: WeirHome, monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder paused past the TTL (alive in /proc all along) loses its lease to a new driver
    with a higher fencing token; once resumed it can neither commit nor renew."""
    import os
    import signal
    import time

    monkeypatch.setenv("WEIR_LEASE_TTL_S", "2")
    first = subprocess.Popen([sys.executable, "-c", FENCED_HOLDER, str(home.root)],
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert first.stdout is not None
        word, token = first.stdout.readline().split()
        assert word == "acquired"
        with pytest.raises(LeaseHeldError):
            leases.acquire(home, "playback")
        first.send_signal(signal.SIGSTOP)
        time.sleep(3)                                   # longer than the TTL
        with leases.acquire(home, "playback") as second:
            assert second.fencing_token == int(token) + 1
            first.send_signal(signal.SIGCONT)
            assert first.wait(30) == 4
            assert first.stdout.readline().startswith("fenced")
            # the woken holder did not renew over the new one's lease
            assert leases.holder(home, "playback").token == second.token  # type: ignore[union-attr]
            second.check()
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()
    # the counter survives a release: the next holder's token is higher still
    with leases.acquire(home, "playback") as third:
        assert third.fencing_token == int(token) + 2


def test_the_one_liveness_judgement() -> None:
    """Gone when this host proves the process ended; expired when its own renewal is older than
    the TTL, whatever /proc says (paused, other host, no /proc); live otherwise."""
    from spark_jobs.control.liveness import Liveness, holder_may_commit, judge

    assert judge(False, 0.0, 30) is Liveness.GONE
    assert judge(True, 31.0, 30) is Liveness.EXPIRED          # alive in /proc, but silent: paused
    assert judge(None, 31.0, 30) is Liveness.EXPIRED          # another host
    assert judge(None, 5.0, 30) is Liveness.LIVE and judge(True, 5.0, 30) is Liveness.LIVE
    # the holder stops trusting its lease before anyone may take it
    assert holder_may_commit(23.9, 30) and not holder_may_commit(24.1, 30)


def test_an_expired_holder_that_still_runs_is_stalled(home: WeirHome) -> None:
    import dataclasses
    import datetime as dt

    from spark_jobs.control.health import assess

    held = leases.acquire(home, "playback")
    try:
        held._released.set()              # its keep-alive stops, as in a paused driver
        old = leases.iso(leases.now_utc() - dt.timedelta(seconds=60))
        plant_lease(home, dataclasses.replace(held.record, renewed_at=old))
        health = assess(home, "playback", stall_after_s=60)
        assert health.verdict == "stalled" and "not renewed for 60s" in health.detail, health
        assert leases.holder(home, "playback") is None
        with pytest.raises(leases.LeaseLostError, match="last renewed"):
            held.check()
    finally:
        held.release()   # else this process's later writes to "playback" are fenced by a lost lease


def test_a_shared_lease_fences_with_the_holders_token_and_is_lost_with_it(home: WeirHome) -> None:
    """The driver's second process (`spark_jobs.derived`) shares its lease: the same fencing token,
    its writes counted above the holder's, never given back by it, and lost when the holder's is."""
    with pytest.raises(LeaseLostError, match="holds no driver lease"):
        leases.join(home, "playback", os.getpid())
    with leases.acquire(home, "playback") as held:
        with pytest.raises(LeaseLostError, match=f"pid {os.getpid() + 1} on"):
            leases.join(home, "playback", os.getpid() + 1)
        shared = leases.join(home, "playback", os.getpid())
        assert shared.fencing.token == held.fencing_token
        assert shared.fencing.next_version() > held.fencing.next_version() + 1_000_000
        shared.release()
        assert leases.holder(home, "playback").token == held.token  # type: ignore[union-attr]
        shared.check()
        # another driver takes the pipeline over (the holder was paused past its TTL, say)
        plant_lease(home, dataclasses.replace(held.record, pid=held.record.pid + 1, token="other",
                                              fencing_token=held.fencing_token + 1))
        with pytest.raises(LeaseLostError, match="taken over"):
            shared.check()
