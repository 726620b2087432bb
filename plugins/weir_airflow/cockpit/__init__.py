"""The Weir view inside the Airflow UI: a FastAPI app the Weir plugin mounts on Airflow's API
server (`/weir`), behind Airflow's login, rendering `spark_jobs.cockpit` as HTML and JSON."""
