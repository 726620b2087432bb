"""The cockpit in a real browser, on a real stream: `make up` on a fresh WEIR_HOME (Airflow, the
landing-file generator, `playback` deployed through its P_stream DAG), then Debian's Chromium
driven by Playwright does what the on-call engineer does: logs in with the generated password,
opens the Weir view from Airflow's nav, sees playback RUNNING with non-zero rates and its plots,
checks the back-fill form's dates, restarts the stream from its latest checkpoint backup with a
reason, approves the plan in Airflow's own Required Actions form, and sees on the pipeline's page
the restart with its approver and reason and the stream RUNNING under a new driver. Then Ctrl-C
stops it all and the tables hold every landing line once. Screenshots go to the module's tmp dir
(docs/images/cockpit-*.png are copies)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.ports import free_ports
from tests.helpers import assert_exactly_once, landing_keys, table
from tests.support.make_up import MakeUp, make_up
from tests.support.polling import wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]
P = "playback"
WEIR = REPO_ROOT / ".venv" / "bin" / "weir"
CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium, headless, without the background traffic that has nowhere to go here.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000
# A landing file every 10 s keeps every batch fed (make up's default is 30 s).
GENERATE_EVERY_S = "10"
REASON = "browser test: INC-40"
APPROVAL_REASON = "approved in the browser: backup checked"
log = logging.getLogger(__name__)


@dataclass
class Stack:
    """A running `make up`: its Airflow's address and home, and Weir's home."""

    made: MakeUp
    base: str
    home: WeirHome
    shots: Path

    @property
    def password(self) -> str:
        path = self.home.root / "airflow" / "simple_auth_manager_passwords.json.generated"
        return json.loads(path.read_text())["admin"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make up` on a fresh WEIR_HOME, once its Airflow answers and the stream is triggered."""
    folder = tmp_path_factory.mktemp("cockpit-browser")
    home = WeirHome(folder / "weir")
    [port] = free_ports(1)
    with make_up(home, folder / "up.log", WEIR_AIRFLOW_PORT=str(port),
                 WEIR_GENERATE_EVERY_S=GENERATE_EVERY_S) as made:
        wait_for("make up to print the login", lambda: "login:" in made.tail(), 300, poll_s=2,
                 abort=lambda: made.process.poll() is not None and f"up.sh exited:\n{made.tail()}")
        shots = folder / "screenshots"
        shots.mkdir()
        yield Stack(made, f"http://localhost:{port}", home, shots)


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


def test_on_call_restart_from_a_backup_approved_in_airflow_on_a_live_stream(
        browser: Any, stack: Stack, request: pytest.FixtureRequest) -> None:
    page, home = browser, stack.home
    day = record_dq_run(home)

    # Airflow's own login page (the simple auth manager's), with the password make up printed.
    page.goto(f"{stack.base}/")
    page.wait_for_url(re.compile(r".*/login.*"))
    page.locator("input[name='username']").fill("admin")
    page.locator("input[name='password']").fill(stack.password)
    shot(page, stack, "0-login")
    page.locator("button[type='submit']").click()
    page.wait_for_url(lambda url: "login" not in url)

    # The Weir view from Airflow's nav (an iframe of the plugin's app), until the stream that
    # make up deployed runs and its queries report rows flowing in and processed.
    page.get_by_role("link", name="Weir").or_(page.get_by_role("button", name="Weir")).first.click()
    page.wait_for_url(re.compile(r".*/plugin/weir.*"))
    view = page.frame_locator("iframe")

    def flowing() -> list[dict[str, str]] | None:
        reload_view(page, view)
        view.get_by_role("link", name=P).first.wait_for()
        queries = overview_rows(view, P)
        rates = [(rate(q["input rows/s"]), rate(q["processed rows/s"])) for q in queries]
        return queries if queries[0]["state"] == "RUNNING" and any(i > 0 and o > 0 for i, o in rates) \
            else None

    queries = wait_for("playback RUNNING with rows flowing", flowing, 300, poll_s=5,
                       abort=lambda: stack.made.process.poll() is not None and "make up exited")
    shot(page, stack, "1-overview")
    old_driver = queries[0]["driver pid"]
    assert old_driver.isdigit() and queries[0]["latest DQ"].startswith("passed at "), queries

    # The backup a restore goes back to (the hourly P_checkpoint_backup's, taken now).
    backup = json.loads(weir(stack, "checkpoint", "backup", P, "--reason", "browser test", "--json"))
    assert backup["id"], backup

    # The pipeline's page: every plot drawn from the stream's progress, not just present.
    view.get_by_role("link", name=P).first.click()
    view.locator(".plots svg").first.wait_for()
    plots = view.locator(".plots svg")
    assert plots.count() == 4
    points = view.locator(".plots polyline").evaluate_all("lines => lines.map(l => l.points.numberOfItems)")
    assert points and max(points) >= 2, points
    drawn = plots.first.bounding_box()
    assert drawn is not None and drawn["width"] > 100 and drawn["height"] > 50, drawn
    assert shot(page, stack, "2-pipeline").stat().st_size > 10_000, "a blank screenshot"

    # The back-fill's form comes pre-filled with the dates of the latest DQ run.
    view.locator("a.action", has_text="back-fill").click()
    view.locator("input[name='from_date']").wait_for()
    dates = [view.locator(f"input[name='{f}']").input_value() for f in ("from_date", "to_date")]
    assert dates == [day.isoformat()] * 2, dates
    view.locator("a", has_text=P).first.click()

    # A restart from the latest backup: the restart's form, then Airflow's page of the new run.
    view.locator("a.action", has_text="restart").click()
    view.locator("select[name='mode']").wait_for()
    assert view.locator("select[name='mode']").input_value() == "restart"
    view.locator("select[name='mode']").select_option("restore_backup")
    view.locator("input[name='backup_id']").fill("latest")
    view.locator("input[name='reason']").fill(REASON)
    shot(page, stack, "3-action-form")
    view.locator("#trigger").click()
    view.locator("#run").wait_for()
    view.locator("#run").click()             # Airflow's own page of the new run
    page.wait_for_url(re.compile(rf".*/dags/{P}_restart/runs/manual__.+"), wait_until="commit")
    run_url = page.url
    # make up switches the on-call DAGs on: the run starts without anyone finding a pause switch.
    # (Its state is read once the run's tasks are shown: the switch is drawn before the DAG loads.)
    page.get_by_text("PlanApprovalOperator").first.wait_for()
    page.locator("[data-testid='toggle-pause'][data-state='checked']").first.wait_for()
    shot(page, stack, "4-dag-run")

    # The plan waits in Airflow's Required Actions: the approver reads it, gives a reason, approves.
    approve = page.get_by_role("button", name="Approve")

    def awaiting() -> bool:
        page.goto(f"{run_url}/tasks/approve/required_actions")
        page.get_by_text("approve", exact=True).first.wait_for()
        try:
            approve.wait_for(timeout=5_000)
        except Exception:                     # not parked yet: the plan is still running
            return False
        return True

    wait_for("the restart's plan in Required Actions", awaiting, 300, poll_s=3)
    # A person reads the plan for longer than Airflow needs to be done with the worker that parked
    # the approval; answering sooner can have Airflow fail it (plugins/weir_airflow/approval.py).
    wait_for("Airflow done with the parked approval's worker", lambda: parked_worker_done(stack), 60)
    page.get_by_text(f"Approve restart restore_backup of {P}?").wait_for()
    page.get_by_text(backup["id"]).first.wait_for()   # the plan names the backup restored
    page.locator("#element_reason").fill(APPROVAL_REASON)
    shot(page, stack, "5-approval")
    approve.click()
    page.get_by_text("Response received").first.wait_for()

    # Back on the pipeline's page: the restart in the event log with who approved it and why, and
    # the stream RUNNING again under a new driver.
    page.goto(f"{stack.base}/plugin/weir")
    view.get_by_role("link", name=P).first.click()
    view.locator(".plots svg").first.wait_for()

    def restarted() -> dict[str, str] | None:
        reload_view(page, view)
        view.locator(".plots svg").first.wait_for()
        [summary] = table_rows(view.locator("table").first)
        logged = [e for e in table_rows(view.locator("h3:text-is('Event log') + table"))
                  if (e["action"], e["outcome"]) == ("restart", "requested")]
        if summary["state"] == "RUNNING" and summary["driver pid"] not in ("–", old_driver) and logged:
            return logged[0]
        return None

    event = wait_for("playback RUNNING again after the restart", restarted, 420, poll_s=5)
    assert (event["actor"], event["reason"]) == ("admin", REASON), event
    assert event["approval"] == f"Approve by admin: {APPROVAL_REASON}", event
    view.locator("h3:text-is('Event log')").evaluate("heading => heading.scrollIntoView()")  # at the top
    shot(page, stack, "6-restarted")

    # Every landing file there is now gets read (the restore went back to the backup's batch and
    # re-read what came after it), then Ctrl-C; each line in bronze once, each event in silver once.
    files = sorted(home.landing(P).glob("*.jsonl"))
    wait_for("bronze to hold every landing file", lambda: sources(files) <= bronze_sources(home), 240,
             poll_s=3)
    log.info("bronze holds every landing file; Ctrl-C")
    assert stack.made.ctrl_c() == 130, stack.made.tail()
    log.info("make up stopped")
    spark = request.getfixturevalue("spark")
    bronze = table(spark, home.table("bronze", "playback_events"))
    read = [f for f in home.landing(P).glob("*.jsonl") if sources([f]) <= bronze_sources(home)]
    assert set(files) <= set(read)
    assert_exactly_once(bronze, ("source", "position"), landing_keys(read), "bronze")
    silver = table(spark, home.table("silver", "playback_events"))
    count, distinct = silver.count(), silver.select("event_id").distinct().count()
    assert count == distinct > 0, (count, distinct)


def record_dq_run(home: WeirHome) -> dt.date:
    """A DQ run over today, written by the DQ runner's writer (P_dq, hourly, is paused after make
    up and its Great Expectations job would cost this test a JVM): the back-fill's dates."""
    from spark_jobs.quality import results
    from spark_jobs.quality.report import DqReport, ExpectationOutcome

    now = dt.datetime.now(dt.UTC)
    outcome = ExpectationOutcome("silver.playback_events", "expect_column_values_to_be_unique(event_id)",
                                 "expect_column_values_to_be_unique", "fail", True, element_count=1)
    results.append(DqReport("browser-dq", P, now, now.date(), now.date(), (outcome,), home.root / "dq",
                            False, 1.0), home)
    return now.date()


def weir(stack: Stack, *args: str) -> str:
    done = subprocess.run([str(WEIR), *args], env=stack.made.env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def parked_worker_done(stack: Stack) -> bool:
    """Whether the scheduler has processed the exit of the worker that parked the restart's approval
    (its log says so; nothing in the REST API does)."""
    scheduler_log = (stack.home.logs / "airflow-standalone.log").read_text(errors="replace")
    return ("Received executor event with state success for task instance "
            f"TaskInstanceKey(dag_id='{P}_restart', task_id='approve'") in scheduler_log


def sources(files: list[Path]) -> set[str]:
    """The bronze `source` of each landing file (its URI and content hash)."""
    return {source for source, _ in landing_keys(files)}


def bronze_sources(home: WeirHome) -> set[str]:
    """The landing files bronze holds lines of, read with delta-rs (no JVM while the stream runs)."""
    from spark_jobs.control import platform_tables

    path = home.table("bronze", "playback_events")
    return {row["source"] for row in platform_tables.read(path, columns=["source"])}


def reload_view(page: Any, view: Any) -> None:
    """Reload the Weir view's iframe (not Airflow's page around it), as its refresh would."""
    view.locator("table").first.wait_for()   # Airflow sets the iframe's address once it has loaded
    frame = page.locator("iframe").element_handle().content_frame()
    frame.goto(frame.url)


def rate(text: str) -> float:
    return 0.0 if text in ("", "–") else float(text)


def shot(page: Any, stack: Stack, name: str) -> Path:
    """A screenshot of the whole page; its time in the log tells where a slow run spent its time."""
    path = stack.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    log.info("screenshot %s", path)
    return path


def table_rows(locator: Any) -> list[dict[str, str]]:
    """The rows of an HTML table as shown, by column header."""
    headers = locator.locator("tr").first.locator("th").all_inner_texts()
    return [dict(zip(headers, r.locator("td").all_inner_texts(), strict=True))
            for r in locator.locator("tr").all()[1:]]


def overview_rows(view: Any, pipeline: str) -> list[dict[str, str]]:
    """The overview's rows of `pipeline` as shown (one per query of its driver), by column."""
    rows = table_rows(view.locator("table").first)
    start = next(i for i, r in enumerate(rows) if r["pipeline"] == pipeline)
    mine = [rows[start]]
    for r in rows[start + 1:]:
        if r["pipeline"]:
            break
        mine.append(r)
    return mine
