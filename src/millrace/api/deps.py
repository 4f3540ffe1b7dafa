"""What routes depend on: the workspace, the monitor, and the bearer token check.

A router added to the service reads what it needs through these, for example:

    @router.get("/tables/{table}/{key}")
    def lookup(table: str, key: str, workspace: Workspace = Depends(get_workspace)): ...
"""

from __future__ import annotations

import secrets

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from millrace.config.workspace import Workspace
from millrace.errors import MillraceError
from millrace.monitor.service import Monitor

_bearer = HTTPBearer(auto_error=False, description="Required when the service has a token.")


class UnauthorizedError(MillraceError):
    """The request's bearer token is missing or wrong."""

    code = "unauthorized"


def get_workspace(request: Request) -> Workspace:
    """The workspace the service serves."""
    workspace: Workspace = request.app.state.workspace
    return workspace


def get_monitor(request: Request) -> Monitor:
    """The service's monitor."""
    monitor: Monitor = request.app.state.monitor
    return monitor


def require_token(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
) -> None:
    """Refuse the request unless it carries the service's token (when it has one)."""
    token: str | None = request.app.state.token
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not secrets.compare_digest(given.encode(), token.encode()):
        raise UnauthorizedError(
            "this service requires a bearer token, and the request had none or a wrong one",
            hint="send the header 'Authorization: Bearer <token>' with the token given to "
            "`millrace serve`",
        )
