"""The cockpit's FastAPI app: HTML pages and the JSON endpoints behind them, every route behind
Airflow's own login (the API server's auth manager: a JWT cookie from the UI's login, or a bearer
token) and the permission to see plugin views."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse

from spark_jobs import catalog
from spark_jobs.cockpit import pipeline_view
from spark_jobs.home import WeirHome
from weir_airflow.cockpit import pages

log = logging.getLogger(__name__)
URL_PREFIX = "/weir"


async def _requires_login(request: Request) -> None:
    """Airflow's own check for its API routes, applied to every cockpit route: 401 without a
    valid token (the UI login's cookie or a bearer token), 403 without the permission to see
    views. Airflow's security module is imported on the first request, not when the plugin is
    loaded: the scheduler, triggerer and DAG processor load plugins too."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_access_view

    user = await get_user(request, None, await bearer_scheme(request))
    requires_access_view(AccessView.PLUGINS)(request, user)


def _known(name: str) -> str:
    if name not in catalog.names():
        raise HTTPException(status_code=404, detail=f"no pipeline {name!r} in the catalog")
    return name


def _airflow_root(request: Request) -> str:
    """Airflow UI's root as seen by the browser: the mount point of this app, minus its prefix."""
    root = request.scope.get("root_path", "").removesuffix(URL_PREFIX)
    return root.rstrip("/") + "/"


def create_app() -> FastAPI:
    """The app the plugin mounts at `URL_PREFIX`. WEIR_HOME is read per request, so the API
    server follows the environment it was started with (and tests their own)."""
    app = FastAPI(title="Weir", dependencies=[Depends(_requires_login)])

    # The readers block (file I/O, delta-rs): they run in a worker thread, off the event loop
    # the API server shares with Airflow's own routes.
    @app.get("/api/pipelines")
    async def pipelines_json() -> list[dict[str, Any]]:
        return await asyncio.to_thread(pipeline_view.overview_all, WeirHome.from_env())

    @app.get("/api/pipelines/{name}")
    async def pipeline_json(name: str) -> dict[str, Any]:
        return await asyncio.to_thread(pipeline_view.detail, WeirHome.from_env(), _known(name))

    @app.get("/", response_class=HTMLResponse)
    async def overview_html() -> str:
        return pages.overview_page(await asyncio.to_thread(pipeline_view.overview_all, WeirHome.from_env()))

    @app.get("/pipelines/{name}", response_class=HTMLResponse)
    async def pipeline_html(name: str, request: Request) -> str:
        detail = await asyncio.to_thread(pipeline_view.detail, WeirHome.from_env(), _known(name))
        return pages.pipeline_page(detail, airflow_root=_airflow_root(request))

    return app
