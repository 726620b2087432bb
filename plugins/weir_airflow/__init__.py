"""Weir's Airflow plugin: the hook that launches detached drivers through spark-submit, the
deferrable trigger that watches them, the operators that deploy, supervise, stop and restart
them, the factory that declares every pipeline's DAGs from the catalog, and the tables' assets
with the watcher that turns Delta commits into asset events.

Modules here import Airflow and the light parts of `spark_jobs`; pyspark and friends are
imported only inside task code.
"""
