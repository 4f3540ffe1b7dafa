"""Errors over HTTP: the CLI's code, message and hint as JSON, with a fitting status.

Every error a route raises is a `MillraceError` and becomes
`{"error": {"code": ..., "message": ..., "hint": ...}}`; a request whose parameters do not
validate gets the same shape with code `bad-request`. Anything else is a 500 with the same
shape and no traceback (the traceback goes to the server's log). A query over its time or
row limit (code `sql-limit`), or whose tables are too big for the service to read
(`sql-size`), is a 422, which `POST /sql` documents besides `ERROR_RESPONSES`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from millrace.errors import MillraceError

_log = logging.getLogger(__name__)

_STATUS_BY_CODE = {
    "config": 400,
    "schema": 400,
    "sql": 400,
    "sql-limit": 422,
    "sql-size": 422,
    "stream-invalid": 400,
    "table-invalid": 400,
    "bad-request": 400,
    "unauthorized": 401,
    "stream-exists": 409,
    "bus": 503,
    "broker": 503,
    "publish": 503,
    "serving": 503,
}


class ErrorBody(BaseModel):
    """What went wrong, where, and what to do: the fields the CLI prints."""

    code: str
    message: str
    hint: str | None = None


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {  # Any: as FastAPI's responses= takes it
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (400, "A parameter is not valid."),
        (401, "A bearer token is required and was missing or wrong."),
        (404, "No such stream, app, table or row."),
        (500, "An unexpected failure; the server's log has the details."),
        (503, "The bus (Kafka) or the serving store (Redis) did not answer."),
    )
}
"""The error responses every route documents; pass as `responses=` to a router."""


def status_of(error: MillraceError) -> int:
    """The HTTP status of `error`: 404 for unknown names, 400 for bad input, 503 bus down..."""
    if error.code.endswith("not-found"):
        return 404
    return _STATUS_BY_CODE.get(error.code, 500)


def workspace_paths(request: Request) -> Callable[[str | None], str]:
    """A function that writes the workspace's folder as `<workspace>` in a message.

    The service's callers need not know where the workspace lives on its machine.

    Example:
        >>> from millrace.config.workspace import Workspace
        >>> service = FastAPI()
        >>> service.state.workspace = Workspace.locate({"MILLRACE_HOME": "/home/ana/ws"})
        >>> hide = workspace_paths(Request({"type": "http", "app": service}))
        >>> hide("/home/ana/ws/tables/x: no such table")
        '<workspace>/tables/x: no such table'
    """
    root = request.app.state.workspace.root
    folders = sorted({str(root), str(root.resolve())}, key=len, reverse=True)

    def hide(text: str | None) -> str:
        text = text or ""
        for folder in folders:
            text = text.replace(folder, "<workspace>")
        return text

    return hide


def error_response(status: int, code: str, message: str, hint: str | None) -> JSONResponse:
    """The JSON response of one error."""
    body = ErrorResponse(error=ErrorBody(code=code, message=message, hint=hint))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Render every error of `app` as an `ErrorResponse`."""

    @app.exception_handler(MillraceError)
    async def _millrace(request: Request, error: MillraceError) -> JSONResponse:
        hide = workspace_paths(request)
        return error_response(
            status_of(error), error.code, hide(error.message), hide(error.hint) or None
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
            for problem in error.errors()
        )
        return error_response(
            400, "bad-request", f"invalid request: {problems}", "see GET /docs for the parameters"
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = "not-found" if error.status_code == 404 else "http"
        response = error_response(error.status_code, code, str(error.detail), None)
        response.headers.update(error.headers or {})  # such as a 405's Allow
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        _log.exception("%s %s failed", request.method, request.url.path)
        return error_response(
            500,
            "internal",
            f"{request.method} {request.url.path} failed: {type(error).__name__}",
            "the server's log has the details",
        )
