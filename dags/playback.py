"""DAGs of the `playback` pipeline, declared from its catalog entry (see weir_airflow.dag_factory)."""

from weir_airflow.dag_factory import pipeline_dags

globals().update(pipeline_dags("playback"))
