"""The DAGs of every pipeline in the catalog (see `weir_airflow.dag_factory`): adding a catalog
entry adds its DAGs. Declarations only: no I/O beyond importing catalog entries, no Spark."""

from weir_airflow.dag_factory import pipeline_dags

from spark_jobs import catalog

for _name in catalog.names():
    globals().update(pipeline_dags(_name))
