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
