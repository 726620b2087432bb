"""The control store's contract, run against both stores (files under WEIR_HOME, and PostgreSQL
started by infra/cluster/services.sh): leases with fencing tokens (take, renew, refuse a second
holder, take over after the TTL with a higher token, fence the stale holder, race), stop requests
and supervisor state; and a real driver fenced through the PostgreSQL store with no control files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs import stream, topology
from spark_jobs.control import lease as leases
from spark_jobs.control.heartbeat import read_stop_request
from spark_jobs.control.lease import LeaseHeldError, LeaseLostError
from spark_jobs.control.stop import clear_stop_request, request_stop
from spark_jobs.control.store import FileStore, PostgresStore, control_store
from spark_jobs.control.supervision import (
    SupervisorState,
    clear_stopped,
    mark_stopped,
    stopped_marker,
)
from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from tests.cluster.conftest import ClusterServices
from tests.control.test_fencing import TTL_S, settled, start_driver, versions
from tests.helpers import assert_exactly_once, table
from tests.integration.pipelines import playback, write_catalog
from tests.support.polling import wait_for

pytestmark = pytest.mark.cluster

HOLDER = """
import sys, time
from pathlib import Path
from spark_jobs.control import lease
from spark_jobs.home import WeirHome
if len(sys.argv) > 3:                    # a start line: racers leave it together
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
try:
    held = lease.acquire(WeirHome(Path(sys.argv[1])), "playback")
except lease.LeaseHeldError:
    print("refused", flush=True)
    sys.exit(3)
print("acquired", held.fencing_token, flush=True)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        lease.fence("playback")          # what the driver calls before each batch and commit
    except lease.LeaseLostError as err:
        print("fenced", err, flush=True)
        sys.exit(4)
    time.sleep(0.1)
held.release()
"""


def holder(home: WeirHome, seconds: float, start_at: float | None = None) -> subprocess.Popen[str]:
    args = [str(home.root), str(seconds)] + ([] if start_at is None else [str(start_at)])
    return subprocess.Popen([sys.executable, "-c", HOLDER, *args],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))


@pytest.fixture(params=["files", "postgresql"])
def store_home(request: pytest.FixtureRequest, home: WeirHome,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[WeirHome]:
    """A WEIR_HOME whose control state is in the parametrised store (a fresh database each)."""
    if request.param == "postgresql":
        services: ClusterServices = request.getfixturevalue("cluster_services")
        monkeypatch.setenv("WEIR_CONTROL_STORE", services.create_database("contract"))
        assert isinstance(control_store(home), PostgresStore)
    else:
        monkeypatch.delenv("WEIR_CONTROL_STORE", raising=False)
        assert isinstance(control_store(home), FileStore)
    yield home
    if request.param == "postgresql":
        assert not list(home.root.rglob("*.json")), "the PostgreSQL store wrote control files"


def test_take_renew_release_and_tokens_only_grow(store_home: WeirHome) -> None:
    home = store_home
    with leases.acquire(home, "playback") as first:
        assert first.fencing_token == 1
        taken = leases.read(home, "playback")
        assert taken is not None and taken.token == first.token
        time.sleep(0.05)
        first.renew()
        renewed = leases.read(home, "playback")
        assert renewed is not None and renewed.last_renewal > taken.last_renewal
        first.check()
    assert leases.read(home, "playback") is None, "released"
    with leases.acquire(home, "playback") as second:
        assert second.fencing_token == 2, "a released lease's counter stays"


def test_a_live_holder_refuses_a_second_one(store_home: WeirHome) -> None:
    first = holder(store_home, 30)
    try:
        assert first.stdout is not None and first.stdout.readline().split()[0] == "acquired"
        with pytest.raises(LeaseHeldError, match=f"driver pid {first.pid}"):
            leases.acquire(store_home, "playback")
        assert leases.holder(store_home, "playback").pid == first.pid  # type: ignore[union-attr]
    finally:
        first.kill()
        first.wait()


def test_racing_holders_never_both_win(store_home: WeirHome) -> None:
    # A lease that was taken and given back before: the race is over an existing row or file.
    leases.acquire(store_home, "playback").release()
    start_at = time.time() + 8               # every racer's interpreter is up by then
    racers = [holder(store_home, 3, start_at) for _ in range(5)]
    outputs = [r.communicate(timeout=60)[0].strip() for r in racers]
    assert [o.split()[0] for o in outputs].count("acquired") == 1, outputs
    assert sorted(r.returncode for r in racers) == [0] + [3] * 4


def test_a_change_decided_on_an_old_version_is_refused_and_holds_nothing(
        store_home: WeirHome) -> None:
    """A lease change is written only on the version it was decided on, and nothing is held while
    it is decided: a writer that read the lease and then stopped (a GC or VM pause, a frozen
    container) keeps no one waiting, and what it writes when it wakes up is refused, also after
    more changes than the file store keeps versions of."""
    import dataclasses

    from spark_jobs.control.processes import ProcessRef
    from spark_jobs.control.store import LEASE_VERSIONS_KEPT

    home, store = store_home, control_store(store_home)
    leases.acquire(home, "playback").release()          # the lease exists (row / files)
    me, now = ProcessRef.current(), leases.iso(leases.now_utc())
    paused = store.lease_slot("playback")                # read, decided on, then stopped
    paused.put(dataclasses.asdict(leases.LeaseRecord(
        "playback", me.pid, me.host, me.start_ticks, "paused", now, paused.last_fencing_token + 1,
        now)))

    with leases.acquire(home, "playback") as taker:     # goes ahead at once
        assert taker.fencing_token == 2
        assert not store.swap_lease("playback", paused), "a write on an old version landed"
        for _ in range(LEASE_VERSIONS_KEPT + 4):          # its version's file is long removed
            taker.renew()
        assert not store.swap_lease("playback", paused), "a write on a removed version landed"
        taker.check()
        assert leases.read(home, "playback").token == taker.token  # type: ignore[union-attr]
        if isinstance(store, FileStore):
            kept = list(store.lease_folder("playback").iterdir())
            assert len(kept) == LEASE_VERSIONS_KEPT, sorted(p.name for p in kept)
    with leases.acquire(home, "playback") as last:
        assert last.fencing_token == 3, "the refused write handed out no token"


def test_a_paused_holder_is_taken_over_with_a_higher_token_and_fenced(
        store_home: WeirHome, monkeypatch: pytest.MonkeyPatch) -> None:
    home = store_home
    monkeypatch.setenv("WEIR_LEASE_TTL_S", "2")
    first = holder(home, 120)
    try:
        assert first.stdout is not None
        word, token = first.stdout.readline().split()
        assert word == "acquired"
        first.send_signal(signal.SIGSTOP)      # a GC or VM pause: alive in /proc, silent
        time.sleep(3)                          # longer than the TTL
        with leases.acquire(home, "playback") as second:
            assert second.fencing_token == int(token) + 1
            first.send_signal(signal.SIGCONT)
            assert first.wait(30) == 4, "the woken holder noticed it is fenced"
            assert first.stdout.readline().startswith("fenced")
            assert leases.holder(home, "playback").token == second.token  # type: ignore[union-attr]
            second.check()
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()


def test_a_stale_holder_can_neither_renew_nor_pass_its_check(store_home: WeirHome) -> None:
    home = store_home
    stale = leases.acquire(home, "playback", ttl_s=1.0)
    stale._released.set()                      # its keep-alive stops, as in a paused driver
    time.sleep(1.3)
    with leases.acquire(home, "playback", ttl_s=1.0) as successor:
        assert successor.fencing_token == stale.fencing_token + 1
        with pytest.raises(LeaseLostError, match="taken over"):
            stale.check()
        with pytest.raises(LeaseLostError):
            stale.renew()
        stale.release()                        # never removes the successor's lease
        assert leases.read(home, "playback").token == successor.token  # type: ignore[union-attr]


def test_stop_request_and_supervisor_state_round_trip(store_home: WeirHome) -> None:
    home = store_home
    assert read_stop_request(home, "playback") is None
    request_stop(home, "playback", "abc", actor="oncall", reason="maintenance")
    request = read_stop_request(home, "playback")
    assert request is not None and (request["token"], request["actor"], request["reason"]) == (
        "abc", "oncall", "maintenance")
    clear_stop_request(home, "playback")
    assert read_stop_request(home, "playback") is None

    assert SupervisorState.load(home, "playback").state == "none"
    SupervisorState("playback", "restarting", "driver exited 137").save(home)
    loaded = SupervisorState.load(home, "playback")
    assert (loaded.state, loaded.last_reason) == ("restarting", "driver exited 137")
    assert loaded.updated_at is not None

    mark_stopped(home, "playback", actor="oncall", reason="weekend")
    marker = stopped_marker(home, "playback")
    assert marker is not None and (marker["actor"], marker["intent"]) == ("oncall", "stop")
    clear_stopped(home, "playback")
    assert stopped_marker(home, "playback") is None


@pytest.mark.slow
def test_a_driver_fenced_through_postgresql_commits_nothing(
        spark, home: WeirHome, tmp_path: Path, cluster_services: ClusterServices,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real drivers whose lease is in PostgreSQL (no shared files): the first is paused past its
    TTL, a second one takes over and ingests the backlog; the first wakes up fenced, exits 4 and
    commits nothing; every layer exactly once; no lease or heartbeat file under WEIR_HOME."""
    url = cluster_services.create_database("fencing")
    monkeypatch.setenv("WEIR_CONTROL_STORE", url)
    pipeline = playback(files_per_trigger=1)
    conf = write_catalog(tmp_path / "conf", files_per_trigger=1)
    written = generate(home.landing("playback"), files=3, sessions_per_file=4, seed=37)
    tables = PipelineTables.of(home, pipeline)
    commits = topology.checkpoint_location(home, pipeline, "ingest") / "commits"
    first = start_driver(home, conf, "first")
    second = None
    try:
        wait_for("the first driver's first committed batch",
                 lambda: commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()), 600,
                 poll_s=0.2, abort=lambda: None if first.poll() is None else f"exited {first.returncode}")
        held = leases.read(home, "playback")
        assert held is not None and held.pid == first.pid and held.fencing_token == 1
        assert read_heartbeat_pid(home) == first.pid
        first.send_signal(signal.SIGSTOP)
        before_takeover = settled(tables, quiet_s=3, at_least_s=TTL_S + 2)

        second = start_driver(home, conf, "second", "--once")
        assert second.wait(600) == 0, (home.root / "second.log").read_text()[-3000:]
        assert "taking over the expired lease" in (home.root / "second.log").read_text()
        after_takeover = versions(tables)
        assert after_takeover["bronze"] > before_takeover["bronze"], "the new holder wrote the backlog"

        first.send_signal(signal.SIGCONT)
        code = first.wait(300)
        log = (home.root / "first.log").read_text()
        assert code == 4, log[-3000:]
        assert "LEASE LOST" in log and "FENCED" in log, log[-3000:]
        assert versions(tables) == after_takeover, "the fenced driver committed after the takeover"
    finally:
        for driver in (first, second):
            if driver is not None and driver.poll() is None:
                driver.send_signal(signal.SIGCONT)
                driver.kill()
                driver.wait(30)

    control = home.control("playback")
    assert not [p.name for p in control.glob("*.json") if p.stem in (
        "lease", "fencing", "heartbeat", "stop-request", "supervisor", "stopped")], \
        "control state went to files although WEIR_CONTROL_STORE is PostgreSQL"
    assert not (control / "lease").exists()
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert_exactly_once(table(spark, tables.silver), ("event_id",), written.event_ids, "silver")
    bronze = table(spark, tables.bronze)
    assert bronze.count() == bronze.select("source", "position").distinct().count() == written.lines
    with leases.acquire(home, "playback") as last:
        assert last.fencing_token == 4, "first 1, second 2, the in-process run 3: tokens only grow"


def read_heartbeat_pid(home: WeirHome) -> int | None:
    from spark_jobs.control.heartbeat import read_heartbeat

    beat = read_heartbeat(home, "playback")
    return None if beat is None else int(beat["pid"])
