"""The Weir view in Airflow: its JSON and pages, served by the plugin's FastAPI app behind
Airflow's auth manager, show what the platform tables of a real `weir run playback --once` hold
(read back here with Spark, the way an analyst would), and nothing without a login."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from spark_jobs import catalog, cli
from spark_jobs.checkpoints import layout
from spark_jobs.home import WeirHome
from spark_jobs.layers import PipelineTables
from spark_jobs.topology import QUERIES, checkpoint_location, query_name

P = "playback"
os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "weir-cockpit-test")


@pytest.fixture(scope="module")
def ran(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeirHome]:
    """A WEIR_HOME where `weir run playback --once`, `weir dq` and a checkpoint backup ran."""
    from spark_jobs.generator import generate

    root = tmp_path_factory.mktemp("cockpit") / "weir"
    root.mkdir()
    saved = os.environ.get("WEIR_HOME")
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    os.environ["WEIR_HOME"] = str(root)
    try:
        generate(root / "landing" / P, files=2, sessions_per_file=4, seed=13, bad_ratio=0.2)
        assert cli.main(["run", P, "--once"]) == 0
        assert cli.main(["dq", P, "--no-freshness"]) in (0, 1)   # a verdict either way
        assert cli.main(["checkpoint", "backup", P, "--reason", "cockpit test"]) == 0
        yield WeirHome(root)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)   # `weir run` sets the pipeline's
        if saved is None:
            os.environ.pop("WEIR_HOME", None)
        else:
            os.environ["WEIR_HOME"] = saved


def token(role: str | None) -> str:
    """A JWT of Airflow's own (simple) auth manager, as its login hands the UI."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="oncall", role=role))


@pytest.fixture(scope="module")
def client(airflow_db: None) -> TestClient:
    from airflow.api_fastapi.app import init_auth_manager
    from fastapi import FastAPI
    from weir_airflow.cockpit.app import URL_PREFIX, create_app

    # Mounted as Airflow's API server mounts plugin apps (with its auth manager initialised), so
    # relative links and the login check behave the same.
    root = FastAPI()
    init_auth_manager(root)
    root.mount(URL_PREFIX, create_app())
    return TestClient(root)


def get(client: TestClient, path: str, role: str | None = "viewer") -> Any:
    response = client.get(f"/weir{path}", headers={"Authorization": f"Bearer {token(role)}"})
    assert response.status_code == 200, response.text[:500]
    return response


def spark_rows(spark, path: Path, where: str) -> list[Any]:
    return spark.read.format("delta").load(str(path)).where(where).collect()


def test_every_route_refuses_a_request_without_login_or_permission(client: TestClient, ran: WeirHome) -> None:
    for path in ("/", "/api/pipelines", f"/api/pipelines/{P}", f"/pipelines/{P}"):
        assert client.get(f"/weir{path}").status_code == 401, path
        bad = client.get(f"/weir{path}", headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 403, path
        no_role = client.get(f"/weir{path}", headers={"Authorization": f"Bearer {token(None)}"})
        assert no_role.status_code == 403, path


def test_overview_shows_what_the_platform_tables_hold(spark, client: TestClient, ran: WeirHome) -> None:
    overview = {p["pipeline"]: p for p in get(client, "/api/pipelines").json()}
    assert set(overview) == set(catalog.names())
    row = overview[P]
    pipeline = catalog.load(P)
    progress = spark_rows(spark, ran.table("platform", "stream_progress"), f"pipeline = '{P}'")
    assert progress, "the run wrote no progress"
    for query in QUERIES:
        name = query_name(pipeline, query)
        newest = max((r for r in progress if r["query"] == name), key=lambda r: r["recorded_at"])
        shown = row["progress"][query]
        assert shown["query"] == name
        assert shown["batch_id"] == newest["batch_id"]
        assert shown["input_rows_per_second"] == newest["input_rows_per_second"]
        assert shown["processed_rows_per_second"] == newest["processed_rows_per_second"]
        assert shown["batch_duration_ms"] == newest["batch_duration_ms"]
        assert shown["watermark"] == newest["watermark"]
    assert row["watermark"] == row["progress"]["gold"]["watermark"]
    assert row["state"] in ("STOPPED", "NOT_DEPLOYED")   # a --once run leaves no driver
    assert row["driver_pid"] is None

    tables = PipelineTables.of(ran, pipeline)
    bronze = spark.read.format("delta").load(str(tables.bronze)).count()
    quarantine = spark.read.format("delta").load(str(tables.quarantine)).count()
    assert quarantine > 0, "the generator's bad lines should be quarantined"
    assert row["quarantine"] == {"bronze_rows": bronze, "quarantine_rows": quarantine,
                                 "share": quarantine / bronze}

    dq = spark_rows(spark, ran.table("platform", "dq_results"), f"pipeline = '{P}'")
    run_id = max(dq, key=lambda r: r["run_time"])["run_id"]
    run = [r for r in dq if r["run_id"] == run_id]
    assert row["dq"]["run_id"] == run_id
    assert row["dq"]["success"] == run[0]["run_success"]
    assert row["dq"]["expectations"] == len(run)
    assert row["dq"]["failed"] == sum(1 for r in run if not r["success"])

    html = get(client, "/").text
    assert f"href='pipelines/{P}'" in html
    shown_share = f"{100 * quarantine / bronze:.2f}% ({quarantine}/{bronze})"
    assert shown_share in html


def test_pipeline_page_shows_progress_events_dq_and_checkpoint(spark, client: TestClient,
                                                               ran: WeirHome) -> None:
    detail = get(client, f"/api/pipelines/{P}").json()
    pipeline = catalog.load(P)
    progress = spark_rows(spark, ran.table("platform", "stream_progress"), f"pipeline = '{P}'")
    # The run just happened: the whole progress history is in the last hour's window.
    newest_first = sorted(progress, key=lambda r: (r["recorded_at"], r["query"], r["batch_id"]), reverse=True)
    assert [(b["query"], b["batch_id"], b["num_input_rows"]) for b in detail["batches"]] == [
        (r["query"], r["batch_id"], r["num_input_rows"]) for r in newest_first[:20]]
    for query in QUERIES:
        name = query_name(pipeline, query)
        rows = sorted((r for r in progress if r["query"] == name), key=lambda r: r["recorded_at"])
        points = detail["series"][name]["batch_duration_ms"]
        assert [v for _, v in points] == [float(r["batch_duration_ms"]) for r in rows]

    events = spark_rows(spark, ran.table("platform", "event_log"), f"pipeline = '{P}'")
    newest = sorted(events, key=lambda e: e["event_time"], reverse=True)[:20]
    assert [(e["action"], e["outcome"]) for e in detail["events"]] == [
        (e["action"], e["outcome"]) for e in newest]
    assert any(e["action"] == "checkpoint backup" and e["reason"] == "cockpit test" for e in detail["events"])

    dq = spark_rows(spark, ran.table("platform", "dq_results"), f"pipeline = '{P}'")
    assert sorted((r["table"], r["expectation"], r["success"]) for r in detail["dq_results"]) == sorted(
        (r["table"], r["expectation"], r["success"]) for r in dq if r["run_id"] == detail["dq"]["run_id"])

    for query in QUERIES:
        commits = checkpoint_location(ran, pipeline, query) / "commits"
        newest_commit = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        assert detail["checkpoint"]["queries"][query]["last_committed_batch"] == newest_commit
    [backup] = detail["checkpoint"]["backups"]
    assert backup["reason"] == "cockpit test"
    assert backup["queries"]["ingest"]["batch"] == layout.last_committed(
        checkpoint_location(ran, pipeline, "ingest"))

    actions = {a["label"]: a for a in detail["actions"]}
    assert actions["restart"]["dag_id"] == f"{P}_restart"
    assert actions["stop"]["dag_id"] == f"{P}_stop"
    assert actions["back-fill"]["dag_id"] == f"{P}_backfill"

    html = get(client, f"/pipelines/{P}").text
    assert html.count("<svg") == 4
    assert len(re.findall("<polyline", html)) >= 2 * len(QUERIES)   # rates of each query are plotted
    assert f"href='../pipelines/{P}/actions/restart?" in html        # the action's own form
    assert f"{P}/actions/checkpoint?action=restore&amp;backup_id={backup['id']}" in html
    assert backup["id"] in html
    for event in detail["events"]:
        assert event["action"] in html


def test_an_action_form_is_prefilled_and_refuses_bad_input_or_another_site(client: TestClient,
                                                                           ran: WeirHome) -> None:
    """Airflow 3.3.2's trigger form cannot be pre-filled by URL: the cockpit's own form is, from
    its link; a bad value or a post from another site never reaches Airflow."""
    form = get(client, f"/pipelines/{P}/actions/checkpoint?action=restore&backup_id=20261120T090000Z").text
    assert "<option selected>restore</option>" in form and "value='20261120T090000Z'" in form, form
    assert f"{P}_checkpoint" in form and "approval" in form
    backfill = get(client, f"/pipelines/{P}/actions/backfill?from_date=2026-11-19&to_date=2026-11-20").text
    assert "value='2026-11-19'" in backfill and "value='2026-11-20'" in backfill
    headers = {"Authorization": f"Bearer {token('admin')}"}
    bad = client.post(f"/weir/pipelines/{P}/actions/backfill", headers=headers,
                      data={"from_date": "2026-11-31", "to_date": "2026-11-20"})
    assert bad.status_code == 400 and "from_date: not a date" in bad.text, bad.text[:500]
    foreign = client.post(f"/weir/pipelines/{P}/actions/stop", data={"reason": "x"},
                          headers={**headers, "Origin": "https://elsewhere.example"})
    assert foreign.status_code == 403, foreign.text[:300]
    assert client.post(f"/weir/pipelines/{P}/actions/stop", data={"reason": "x"}).status_code == 401
    assert client.get(f"/weir/pipelines/{P}/actions/nope", headers=headers).status_code == 404


@pytest.fixture(scope="module")
def api_server(ran: WeirHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Airflow's real API server with its UI apps, on the module's WEIR_HOME."""
    with ui_api_server(ran, tmp_path_factory.mktemp("cockpit-airflow") / "airflow") as server:
        yield server


@contextmanager
def ui_api_server(home: WeirHome, airflow_home: Path) -> Iterator[tuple[str, Path]]:
    """Airflow's real API server with its UI apps (`--apps core`) on `home`, the DAGs serialized
    (the cockpit's actions trigger them): (base URL, AIRFLOW_HOME). Only the API server: the view
    needs no scheduler."""
    from tests.airflow.airflow_services import AIRFLOW, AirflowServices
    from tests.support.polling import wait_for

    services = AirflowServices(airflow_home, home)
    services.migrate()
    services.cli("dags", "reserialize", timeout_s=300)    # the DAGs the cockpit's actions trigger
    port = services.ports[0]
    log_path = services.log_path("api-server")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        services.procs["api-server"] = subprocess.Popen(
            [str(AIRFLOW), "api-server", "--apps", "core", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"], env=services.env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=str(services.airflow_home), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("the API server", lambda: _answers(f"{base}/api/v2/monitor/health"), 240, poll_s=2,
                 abort=lambda: None if services.alive("api-server") else "the API server exited")
        yield base, services.airflow_home
    finally:
        services.kill("api-server", sig=signal.SIGTERM)


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_api_server_mounts_the_view_in_its_menu_behind_its_login(api_server: tuple[str, Path]) -> None:
    import httpx

    base, airflow_home = api_server
    assert httpx.get(f"{base}/weir/api/pipelines", timeout=30).status_code == 401
    assert httpx.get(f"{base}/weir/", timeout=30).status_code == 401
    # Log in as the UI does: the simple auth manager's generated password for `admin`.
    passwords = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
    login = httpx.post(f"{base}/auth/token", json={"username": "admin", "password": passwords["admin"]},
                       timeout=30)
    assert login.status_code in (200, 201), login.text
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    plugins = httpx.get(f"{base}/api/v2/plugins", headers=headers, timeout=30).json()["plugins"]
    [weir] = [p for p in plugins if p["name"] == "weir"]
    assert [a["url_prefix"] for a in weir["fastapi_apps"]] == ["/weir"]
    assert [(v["href"], v["destination"]) for v in weir["external_views"]] == [("weir/", "nav")]
    shown = httpx.get(f"{base}/weir/api/pipelines/{P}", headers=headers, timeout=60)
    assert shown.status_code == 200, shown.text[:500]
    assert shown.json()["pipeline"] == P and shown.json()["batches"]
