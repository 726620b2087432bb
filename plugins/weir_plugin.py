"""Registers Weir with Airflow (`airflow plugins` lists it). The operators, hooks and triggers live
in the `weir_airflow` package beside this file; Airflow puts the plugins folder on `sys.path`, so
DAG files and the triggerer import them as `weir_airflow.*`. The plugin also mounts the Weir view
(`weir_airflow.cockpit`) on the API server and adds it to the UI's menu."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin


def _cockpit_apps() -> list[dict[str, Any]]:
    """The cockpit's FastAPI app (FastAPI ships with Airflow 3). Building it reads nothing:
    WEIR_HOME and the tables are read per request, so plugin loading stays cheap."""
    from weir_airflow.cockpit.app import URL_PREFIX, create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Weir cockpit"}]


class WeirPlugin(AirflowPlugin):
    name = "weir"
    fastapi_apps = _cockpit_apps()
    external_views: ClassVar[list[dict[str, Any]]] = [{
        "name": "Weir",
        # Relative to the UI's root, no leading slash (Airflow's rule for external views).
        "href": "weir/",
        "destination": "nav",
        "url_route": "weir",
        "category": None,
    }]
