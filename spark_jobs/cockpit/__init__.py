"""What the Airflow UI's Weir view shows, computed without a JVM from the platform tables and the
files under WEIR_HOME; the FastAPI app in `weir_airflow.cockpit` only renders it."""
