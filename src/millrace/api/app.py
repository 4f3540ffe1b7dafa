"""The FastAPI app of `millrace serve`, and serving it with uvicorn.

`create_app` builds the service from `ROUTERS`: to add routes, write an `APIRouter` in a
module of this package (using `millrace.api.deps` for the workspace and the monitor, and
`ERROR_RESPONSES` for the errors it documents) and append it to `ROUTERS`. Every route
requires the bearer token when the service has one (and only then does the OpenAPI
document declare it). While it runs, the service evaluates
the alert rules every `monitor.interval_s` seconds.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from collections.abc import AsyncIterator

import uvicorn
from fastapi import APIRouter, Depends, FastAPI

from millrace.api import monitoring, results, tables
from millrace.api.deps import require_token
from millrace.api.errors import install_error_handlers
from millrace.config.workspace import Workspace
from millrace.errors import ConfigError
from millrace.monitor.service import Monitor

ROUTERS: list[APIRouter] = [monitoring.router, results.router, tables.router]
"""The routers the service includes, in order."""


def create_app(
    workspace: Workspace,
    *,
    token: str | None = None,
    monitor: Monitor | None = None,
    evaluate_alerts: bool = False,
) -> FastAPI:
    """The service for `workspace`; with `evaluate_alerts`, it checks the alert rules.

    Example:
        >>> app = create_app(Workspace.locate(), token="s3cret")  # doctest: +SKIP
        >>> uvicorn.run(app, host="127.0.0.1", port=8321)  # doctest: +SKIP
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

    app = FastAPI(
        title="millrace",
        summary="Streams, apps and their lag; errors carry the CLI's codes and hints.",
        version="0.1.0",
        lifespan=lifespan,
        # The document declares the bearer scheme only when the service requires it.
        dependencies=[Depends(require_token)] if token else [],
    )
    app.state.workspace = workspace
    app.state.monitor = monitor
    app.state.token = token or None
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app


def serve(workspace: Workspace, *, host: str, port: int, token: str | None) -> None:
    """Run the service on `host:port` until interrupted.

    Raises `ConfigError` when `host` is not a loopback address and there is no token: the
    service would answer anyone who can reach the machine.
    """
    check_binding(host, token)
    app = create_app(workspace, token=token, evaluate_alerts=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


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
