"""The FastAPI app of `millrace serve`, and serving it with uvicorn.

`create_app` builds the service from `ROUTERS`: to add routes, write an `APIRouter` in a
module of this package (using `millrace.api.deps` for the workspace and the monitor, and
`ERROR_RESPONSES` for the errors it documents) and append it to `ROUTERS`. The dashboard's
pages (`millrace.api.dashboard`) are under `/ui/`, out of the OpenAPI document. Every route,
the OpenAPI document (`/openapi.json`) and its pages (`/docs`, `/redoc`) included, requires
the bearer token when the service has one (and only then does the document declare it).
Each request waits at most `BUS_WAIT_S` for Kafka, so that with the bus down it gets its 503
at once. While it runs, the service evaluates the alert rules every `monitor.interval_s`
seconds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, params
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from millrace.api import (
    app_details,
    history,
    monitoring,
    pipeline,
    records,
    results,
    sql,
    tables,
)
from millrace.api.dashboard.pages import install_dashboard
from millrace.api.deps import require_token
from millrace.api.errors import install_error_handlers
from millrace.bus.timeouts import bus_timeouts_at_most
from millrace.config.workspace import Workspace
from millrace.errors import ConfigError
from millrace.monitor.service import Monitor

ROUTERS: list[APIRouter] = [
    monitoring.router,
    pipeline.router,
    app_details.router,
    history.router,
    records.router,
    results.router,
    tables.router,
    sql.router,
]
"""The routers the service includes, in order."""

BUS_WAIT_S = 2.0
"""How long a request waits for each answer from Kafka before its 503."""
_START_S = 30.0


def create_app(
    workspace: Workspace,
    *,
    token: str | None = None,
    monitor: Monitor | None = None,
    evaluate_alerts: bool = False,
) -> FastAPI:
    """The service for `workspace`; with `evaluate_alerts`, it checks the alert rules.

    Example:
        >>> app = create_app(Workspace.locate({"MILLRACE_HOME": str(tmp_path)}), token="s3cret")
        >>> "/metrics" in app.openapi()["paths"]
        True
    """
    monitor = monitor or Monitor(workspace)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        if evaluate_alerts:
            threading.Thread(
                target=monitor.run_alerts, args=(stop,), name="alerts", daemon=True
            ).start()
        yield
        stop.set()

    guarded: list[params.Depends] = [Depends(require_token)] if token else []
    app = FastAPI(
        title="millrace",
        summary="Streams, apps and their lag; errors carry the CLI's codes and hints.",
        version="0.1.0",
        lifespan=lifespan,
        # The document declares the bearer scheme only when the service requires it.
        dependencies=guarded,
        # FastAPI serves these without dependencies: with a token, the routes below do.
        openapi_url=None if token else "/openapi.json",
        docs_url=None if token else "/docs",
        redoc_url=None if token else "/redoc",
    )
    app.state.workspace = workspace
    app.state.monitor = monitor
    app.state.token = token or None
    install_error_handlers(app)
    app.add_middleware(_BoundedBusWaits, seconds=BUS_WAIT_S)
    for router in ROUTERS:
        app.include_router(router)
    install_dashboard(app)
    if token:
        _guarded_documentation(app, guarded)
    return app


def _guarded_documentation(app: FastAPI, guarded: list[params.Depends]) -> None:
    """`/openapi.json`, `/docs` and `/redoc` behind the token, as FastAPI serves them."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=guarded)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guarded)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False, dependencies=guarded)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


class _BoundedBusWaits:
    """ASGI middleware: within a request, every wait for Kafka lasts at most `seconds`."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Routes run in worker threads, which start with a copy of this context.
        with bus_timeouts_at_most(self.seconds):
            await self.app(scope, receive, send)


def serve(workspace: Workspace, *, host: str, port: int, token: str | None) -> None:
    """Run the service on `host:port` until interrupted.

    Raises `ConfigError` when `host` is not a loopback address and there is no token: the
    service would answer anyone who can reach the machine.
    """
    check_binding(host, token)
    app = create_app(workspace, token=token, evaluate_alerts=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


@contextlib.contextmanager
def background_service(
    workspace: Workspace, *, host: str, port: int, token: str | None = None
) -> Iterator[str]:
    """The service on `host:port` in a thread while the `with` lasts; its address.

    Raises `ConfigError` when the port is taken, or when `host` is beyond loopback without a
    token (as `serve`).
    """
    check_binding(host, token)
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ConfigError(
                f"cannot serve on {host}:{port}: {error.strerror}",
                hint="another `millrace serve` may hold the port; choose another",
            ) from None
    app = create_app(workspace, token=token, evaluate_alerts=True)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="service", daemon=True)
    thread.start()
    deadline = time.monotonic() + _START_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not server.started:
        server.should_exit = True
        raise ConfigError(
            f"the service did not start on {host}:{port}",
            hint="the port may have been taken meanwhile; choose another",
        )
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join()


def check_binding(host: str, token: str | None) -> None:
    """Raise `ConfigError` when `host` is reachable from other machines and there is no token.

    Example:
        >>> check_binding("127.0.0.1", None)
    """
    if not token and not is_loopback(host):
        raise ConfigError(
            f"millrace serve binds to {host}, which is reachable from other machines, "
            "and no token was given",
            hint="pass --token (or set MILLRACE_API_TOKEN), or bind to 127.0.0.1",
        )


def is_loopback(host: str) -> bool:
    """True when `host` is a loopback address or `localhost`.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
        (True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
