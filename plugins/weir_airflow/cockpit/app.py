"""The cockpit's FastAPI app: HTML pages and the JSON endpoints behind them, every route behind
Airflow's own login (the API server's auth manager: a JWT cookie from the UI's login, or a bearer
token) and the permission to see plugin views."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse

from spark_jobs import catalog
from spark_jobs.cockpit import actions, pipeline_view
from spark_jobs.home import WeirHome
from weir_airflow.cockpit import pages, trigger

log = logging.getLogger(__name__)
URL_PREFIX = "/weir"


async def _requires_login(request: Request) -> None:
    """Airflow's own check for its API routes, applied to every cockpit route: 401 without a
    valid token (the UI login's cookie or a bearer token), 403 without the permission to see
    views. Airflow's security module is imported on the first request, not when the plugin is
    loaded: the scheduler, triggerer and DAG processor load plugins too."""

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


def _action(name: str, key: str) -> actions.Action:
    try:
        return actions.find(_known(name), key)
    except KeyError:
        raise HTTPException(status_code=404, detail=f"no action {key!r} for {name}") from None


def _same_origin(request: Request) -> None:
    """Refuse a form posted from another site: the login cookie is SameSite=lax (a cross-site
    POST does not carry it) and, for browsers that send it, the Origin must be this server."""
    origin = request.headers.get("origin")
    if origin and origin.rstrip("/") != f"{request.url.scheme}://{request.url.netloc}":
        raise HTTPException(status_code=403, detail="a cockpit action is posted from the cockpit only")


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

    # An action's form, pre-filled from its link; posting it triggers the DAG through Airflow's
    # REST API with the user's own token (Airflow checks their permission and records them).
    @app.get("/pipelines/{name}/actions/{key}", response_class=HTMLResponse)
    async def action_form(name: str, key: str, request: Request) -> HTMLResponse:
        action = _action(name, key)
        try:
            action = action.prefilled(request.query_params)
        except actions.BadActionInputError as err:
            return HTMLResponse(pages.action_page(name, action, error=str(err)), status_code=400)
        return HTMLResponse(pages.action_page(name, action))

    @app.post("/pipelines/{name}/actions/{key}", response_class=HTMLResponse)
    async def action_trigger(name: str, key: str, request: Request) -> HTMLResponse:
        _same_origin(request)
        action = _action(name, key)
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        try:
            conf = action.conf_of(form)
        except actions.BadActionInputError as err:
            return HTMLResponse(pages.action_page(name, action.prefilled_from(form), error=str(err)),
                                status_code=400)
        token = trigger.user_token(dict(request.headers), dict(request.cookies))
        if token is None:            # the login check passed on a credential this cannot forward
            raise HTTPException(status_code=401, detail="no token to trigger with")
        root = _airflow_root(request)
        done = await trigger.trigger(action, conf, airflow_url=f"{request.url.scheme}://{request.url.netloc}{root}",
                                     token=token)
        log.info("%s: %s triggered from the cockpit: %s (%d)", name, action.dag_id, done.what, done.status)
        page = pages.triggered_page(name, action, conf, done, airflow_root=root)
        return HTMLResponse(page, status_code=200 if done.ok else done.status)

    return app
