"""The cockpit in a real browser: Debian's Chromium driven by Playwright logs into Airflow's real
API server through its login page, opens the Weir view from Airflow's own nav, reads a pipeline's
overview row and its plots as drawn, and triggers a restart from its pre-filled form, landing on
the new run of the right DAG. Screenshots go to the test's tmp dir.

The view's data is written by the writers the driver, the DQ runner and the event log use (no
Spark here: the JVM would cost this module minutes, and test_cockpit.py checks the view against
a real stream's tables)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.home import WeirHome
from tests.airflow.test_cockpit import ui_api_server

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(300)]
P = "playback"
CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium, headless, without the background traffic that has nowhere to go here.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000


QUERIES = ("playback_ingest", "playback_gold")
DQ_DAY = dt.date(2026, 11, 22)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeirHome]:
    """A WEIR_HOME holding the last 30 minutes of playback's progress (a batch per query every
    30 s, as the driver's progress listener records them), a DQ run and an event."""
    from spark_jobs.control import eventlog, platform_tables, progress
    from spark_jobs.quality import results
    from spark_jobs.quality.report import DqReport, ExpectationOutcome

    root = tmp_path_factory.mktemp("cockpit-browser") / "weir"
    root.mkdir()
    home = WeirHome(root)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    rows = []
    for batch in range(60):
        moment = now - dt.timedelta(seconds=30 * (60 - batch))
        for i, query in enumerate(QUERIES):
            row = progress.progress_row(P, {
                "name": query, "id": query, "runId": "browser", "batchId": batch,
                "timestamp": moment.isoformat().replace("+00:00", "Z"), "numInputRows": 400 + batch,
                "inputRowsPerSecond": 80.0 + batch + i, "processedRowsPerSecond": 150.0 + 2 * batch,
                "durationMs": {"triggerExecution": 2000 + 10 * batch}, "sources": [], "stateOperators": [],
                "eventTime": {"watermark": (moment - dt.timedelta(minutes=10)).isoformat()}}, driver_pid=1)
            row["recorded_at"] = moment
            rows.append(row)
    platform_tables.append(progress.table_path(home), rows, progress.schema())
    outcome = ExpectationOutcome("silver.playback_events", "expect_column_values_to_be_unique(event_id)",
                                 "expect_column_values_to_be_unique", "fail", True, element_count=800)
    results.append(DqReport("browser-dq", P, now, DQ_DAY, DQ_DAY, (outcome,), root / "dq", False, 1.0),
                   home)
    eventlog.record(P, "deploy", "started", actor="browser-test", reason="cockpit browser test", home=home)
    yield home


@pytest.fixture(scope="module")
def api_server(recorded: WeirHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with ui_api_server(recorded, tmp_path_factory.mktemp("cockpit-browser-airflow") / "airflow") as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Chromium page of its own (fresh profile), closed with the module."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make setup` installs it (infra/browser/install.sh)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1500, "height": 1000})
        context.set_default_timeout(WAIT_MS)
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def shot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_log_in_see_a_pipeline_and_its_plots_and_trigger_a_prefilled_action(
        browser: Any, api_server: tuple[str, Path], recorded: WeirHome, tmp_path: Path) -> None:
    page = browser
    base, airflow_home = api_server
    passwords = airflow_home / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())["admin"]

    # Airflow's own login page (the simple auth manager's), as a person signs in.
    page.goto(f"{base}/")
    page.wait_for_url(re.compile(r".*/login.*"))
    page.locator("input[name='username']").fill("admin")
    page.locator("input[name='password']").fill(password)
    shot(page, tmp_path, "0-login")
    page.locator("button[type='submit']").click()
    page.wait_for_url(lambda url: "login" not in url)

    # The Weir view from Airflow's nav: an iframe of the plugin app inside Airflow's page.
    page.get_by_role("link", name="Weir").or_(page.get_by_role("button", name="Weir")).first.click()
    page.wait_for_url(re.compile(r".*/plugin/weir.*"))
    view = page.frame_locator("iframe")
    view.get_by_role("link", name=P).first.wait_for()
    shot(page, tmp_path, "1-overview")
    queries = overview_rows(view, P)
    assert len(queries) == len(QUERIES), queries
    first = queries[0]
    assert first["state"] not in ("", "–") and first["latest DQ"].startswith("passed at "), first
    # The newest batch of each query, as recorded: batch 59, 139-140 rows/s in, 268 processed.
    assert {(q["last batch"], float(q["processed rows/s"])) for q in queries} == {("59", 268.0)}, queries
    assert sorted(float(q["input rows/s"]) for q in queries) == [139.0, 140.0], queries

    # The pipeline's page: every plot drawn with its data points, not just present.
    view.get_by_role("link", name=P).first.click()
    view.locator(".plots svg").first.wait_for()
    plots = view.locator(".plots svg")
    assert plots.count() == 4
    points = view.locator(".plots polyline").evaluate_all("lines => lines.map(l => l.points.numberOfItems)")
    # input rate, processing rate, batch duration: one line per query with a point per batch.
    assert len(points) >= 3 * len(QUERIES) and sorted(points)[-6:] == [60] * 6, points
    drawn = plots.first.bounding_box()
    assert drawn is not None and drawn["width"] > 100 and drawn["height"] > 50, drawn
    pipeline_shot = shot(page, tmp_path, "2-pipeline")
    assert pipeline_shot.stat().st_size > 10_000, "a blank screenshot"

    # The back-fill's form comes pre-filled with the dates of the latest DQ run.
    view.locator("a.action", has_text="back-fill").click()
    view.locator("input[name='from_date']").wait_for()
    dates = [view.locator(f"input[name='{f}']").input_value() for f in ("from_date", "to_date")]
    assert dates == [DQ_DAY.isoformat()] * 2, dates
    view.locator("a", has_text=P).first.click()

    # A restart from its pre-filled form: Airflow creates the run as the signed-in user.
    view.locator("a.action", has_text="restart").click()
    view.locator("select[name='mode']").wait_for()
    assert view.locator("select[name='mode']").input_value() == "restart"
    view.locator("input[name='reason']").fill("browser test: INC-40")
    shot(page, tmp_path, "3-action-form")
    view.locator("#trigger").click()
    run_link = view.locator("#run")
    run_link.wait_for()
    shot(page, tmp_path, "4-triggered")
    run_link.click()                        # target=_top: Airflow's own page of the new run
    page.wait_for_url(re.compile(rf".*/dags/{P}_restart/runs/manual__.+"), wait_until="commit")
    page.get_by_text(f"{P}_restart").first.wait_for()
    shot(page, tmp_path, "5-dag-run")

    [run] = _dag_runs(airflow_home, f"{P}_restart")
    conf = json.loads(run["conf"]) if isinstance(run["conf"], str) else run["conf"]
    assert (conf["mode"], conf["reason"]) == ("restart", "browser test: INC-40"), conf
    assert run["triggering_user_name"] == "admin", run


def overview_rows(view: Any, pipeline: str) -> list[dict[str, str]]:
    """The overview's rows of `pipeline` as shown (one per query of its driver), by column."""
    headers = view.locator("tr").first.locator("th").all_inner_texts()
    rows = [dict(zip(headers, r.locator("td").all_inner_texts(), strict=True))
            for r in view.locator("tr").all()[1:]]
    start = next(i for i, r in enumerate(rows) if r["pipeline"] == pipeline)
    mine = [rows[start]]
    for r in rows[start + 1:]:
        if r["pipeline"]:
            break
        mine.append(r)
    return mine


def _dag_runs(airflow_home: Path, dag_id: str) -> list[dict[str, Any]]:
    import sqlite3

    connection = sqlite3.connect(airflow_home / "airflow.db", timeout=30)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute(
            "SELECT run_id, conf, triggering_user_name FROM dag_run WHERE dag_id = ?", (dag_id,))]
    finally:
        connection.close()
