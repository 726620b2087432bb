"""The alert callback names the pipeline a DAG serves, from the DAG's `pipeline:` tag — not by
cutting its id (`playback_checkpoint_backup` is not pipeline `playback_checkpoint`)."""

from __future__ import annotations

import json

from spark_jobs.home import WeirHome


def test_every_dag_alerts_for_its_own_pipeline(home: WeirHome) -> None:
    from weir_airflow.callbacks import alert_on_failure
    from weir_airflow.dag_factory import pipeline_dags

    class TaskInstance:
        task_id = "t"

        def __init__(self, dag_id: str) -> None:
            self.dag_id = dag_id

    dags = pipeline_dags("playback")
    for dag_id, dag in dags.items():
        alert_on_failure({"dag": dag, "ti": TaskInstance(dag_id), "exception": RuntimeError("boom")})
    alerts = [json.loads(line) for line in (home.logs / "alerts.jsonl").read_text().splitlines()]
    assert {a["dag_id"]: a["pipeline"] for a in alerts} == {dag_id: "playback" for dag_id in dags}
