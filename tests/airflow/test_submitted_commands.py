"""The Airflow tasks run their Spark work as spark-submitted `weir` commands: a result comes back
through a private file under WEIR_HOME (removed once read), a verdict (exit 1) is a result, and a
refusal fails the task with the CLI's own one-line reason."""

from __future__ import annotations

import pytest

from spark_jobs.home import WeirHome
from tests.airflow.supervision_harness import LOCAL_MASTER

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(300)]
P = "playback"


@pytest.fixture
def local_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", LOCAL_MASTER)


def test_a_submitted_command_returns_its_result_and_fails_with_its_one_line_reason(
        home: WeirHome, local_spark: None) -> None:
    from weir_airflow.tasks import CommandFailedError, checkpoint_action

    listed = checkpoint_action(P, "backups")
    assert (listed["action"], listed["pipeline"], listed["backups"]) == ("backups", P, []), listed
    assert not any(home.results(P).iterdir()), "a result file is removed once read"

    with pytest.raises(CommandFailedError) as refused:
        checkpoint_action(P, "restore", backup_id="20991231T000000Z", confirm=True, reason="test")
    message = str(refused.value)
    assert message.startswith("weir checkpoint: ") and "20991231T000000Z" in message, message
    assert "\n" not in message and "spark-submit" not in message, message
    assert not any(home.results(P).iterdir())


# The approved actions' task bodies in a fresh interpreter (the test process holds the `spark`
# fixture's JVM), with the payload Airflow's approval step hands over; reports whether that
# interpreter ever launched a Py4J gateway, i.e. a JVM.
APPROVED_IN_A_TASK_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from weir_airflow.tasks import approved_checkpoint_action, approved_refresh

P = sys.argv[2]
payload = {"chosen_options": ["Approve"], "responded_by_user": {"id": "alice", "name": "alice"},
           "params_input": {"reason": "plan read, -ok"}}
reset = approved_checkpoint_action(P, "reset", payload, reset_from="earliest", actor="carol",
                                   reason="INC-31")
refreshed = approved_refresh(P, "bronze", payload, actor="carol", reason="INC-32")
pyspark = sys.modules.get("pyspark")
gateway = getattr(getattr(pyspark, "SparkContext", None), "_gateway", None)
with open(sys.argv[3], "w") as out:   # not stdout: Spark and Airflow log there until exit
    json.dump({"reset": reset, "refreshed": refreshed,
               "jvm_started": gateway is not None}, out, default=str)
"""


@pytest.mark.timeout(900)   # two spark-submitted jobs, each a JVM start on a shared machine
def test_approved_actions_and_the_refresh_are_submitted_with_the_approver_in_the_event_log(
        home: WeirHome, local_spark: None, spark, tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from spark_jobs import stream
    from spark_jobs.checkpoints import backups
    from spark_jobs.control import eventlog
    from spark_jobs.generator import generate
    from tests.integration.pipelines import playback

    generate(home.landing(P), files=1, sessions_per_file=3, seed=43, prefix="s")
    stream.run(playback(files_per_trigger=1), once=True, home=home, spark=spark)
    assert backups.list_backups(home, P) == []
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    report = tmp_path / "task-process.json"
    out = subprocess.run([sys.executable, "-c", APPROVED_IN_A_TASK_PROCESS, str(plugins), P, str(report)],
                         env=dict(os.environ), capture_output=True, text=True, timeout=850)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    seen = json.loads(report.read_text())
    assert seen["jvm_started"] is False, seen
    assert seen["reset"]["generation"] == 1 and seen["refreshed"]["generation"] == 2, seen
    # The reset backed up the live checkpoint first; the refresh found the new generation empty.
    assert [b.id for b in backups.list_backups(home, P)] == [seen["reset"]["old_generation_backup"]], seen
    assert seen["refreshed"]["safety_backup"] is None and seen["refreshed"]["dry_run"] is False, seen
    approver = {"decision": "Approve", "by": "alice", "reason": "plan read, -ok"}
    done = {e["action"]: e for e in eventlog.read(home, P) if e["outcome"] == "ok"}
    for action, reason in (("checkpoint reset", "INC-31"), ("refresh", "INC-32")):
        event = done[action]
        assert (event["actor"], event["reason"], event["details"]["approval"]) == (
            "carol", reason, approver), event
