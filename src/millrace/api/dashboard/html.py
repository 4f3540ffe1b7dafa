"""The dashboard's HTML: the frame every page shares, tables, values, and the login page.

Every piece of text from outside (names, record values, log lines) goes through `escape`.
The stylesheet and the scripts are files of this package (`assets/`), put inline in each page,
so a page needs nothing else from the network, nor from the service without the token. The
query page's script is in every page too: a page reached through the login form is swapped
in by the script, which runs no script the new page carries.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from html import escape as _escape_html
from importlib import resources

from fastapi.responses import HTMLResponse

NAVIGATION = (("/ui/", "pipeline"), ("/ui/alerts", "alerts"), ("/ui/query", "query"))
REFRESH_S = 5
"""How often a page fetches itself again."""


def escape(value: object) -> str:
    """`value` as text safe inside HTML, quotes included.

    Example:
        >>> escape("<b>")
        '&lt;b&gt;'
    """
    return _escape_html("" if value is None else str(value), quote=True)


def page(
    title: str, body: str, *, status_code: int = 200, refresh_s: int = REFRESH_S
) -> HTMLResponse:
    """A whole page: the header, then `body` (HTML) in `<main>`; it refreshes every `refresh_s`.

    Example:
        >>> page("alerts", "<p>none</p>").status_code
        200
    """
    return HTMLResponse(_frame(title, f"<main>{body}</main>", refresh_s), status_code=status_code)


def not_found_page(what: str, hint: str) -> HTMLResponse:
    """The page of a name that does not exist (yet): what was asked for and where to look, a 404.

    It looks again every few seconds, as an app's first batch or table may be on its way.
    """
    body = f'<h1>Not found</h1><p class="not-found">{escape(what)}</p><p>{escape(hint)}</p>'
    return page("not found", body, status_code=404)


def error_page(status_code: int, message: str, hint: str | None) -> HTMLResponse:
    """The page of a failure the service knows (the bus down, a bad name), with its hint."""
    body = f'<h1>Cannot show this page</h1><p class="not-found">{escape(message)}</p>'
    if hint:
        body += f"<p>{escape(hint)}</p>"
    return page("error", body, status_code=status_code)


def login_page() -> HTMLResponse:
    """The page a request without the token gets: a form for the token, with status 401.

    The script sends the token from the form or from the URL's fragment (`#token=...`)
    in the Authorization header; it never goes into a query string.
    """
    body = (
        "<h1>This dashboard needs the service's token</h1>"
        '<p class="refused" hidden>That token was refused.</p>'
        '<form id="login"><input name="token" type="password" autocomplete="current-password" '
        'placeholder="token given to millrace serve" aria-label="token"> '
        "<button>Open</button></form>"
        '<p class="muted">Or open the address with <code>#token=&lt;token&gt;</code> at the end: '
        "the part after # never reaches the server or its logs.</p>"
    )
    return HTMLResponse(_frame("sign in", f"<main data-login>{body}</main>", 0), status_code=401)


def table(headers: list[str], rows: list[list[str]], *, empty: str = "none") -> str:
    """An HTML table of `rows` (cells already HTML) under `headers`; `empty` when no row."""
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(_cell(cell) for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def number(value: float | int | None, digits: int = 1) -> str:
    """A figure for people: `-` for None, thousands with k and M.

    Example:
        >>> number(1234.5), number(12.345), number(None)
        ('1.2k', '12.3', '-')
    """
    if value is None:
        return "-"
    size = abs(value)
    if size >= 1_000_000:
        return f"{value / 1_000_000:.{digits}f}M"
    if size >= 10_000 or (size >= 1000 and isinstance(value, float)):
        return f"{value / 1000:.{digits}f}k"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def value_text(value: object) -> str:
    """A result or record value as compact text: times in ISO-8601, lists and maps as JSON.

    Example:
        >>> value_text([{"item": "#a", "weight": 2.5}])
        '[{"item":"#a","weight":2.5}]'
    """
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False)
    return "" if value is None else str(value)


def state_badge(state: str | None) -> str:
    """An app's or alert's state as a coloured label."""
    if not state:
        return ""
    return f'<span class="state {escape(state.replace(" ", "-"))}">{escape(state)}</span>'


def _cell(cell: str) -> str:
    if cell.startswith("<td"):
        return cell
    return f"<td>{cell}</td>"


def _frame(title: str, main: str, refresh_s: int) -> str:
    links = "".join(f'<a href="{href}">{escape(name)}</a>' for href, name in NAVIGATION)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · millrace</title><style>{_asset('dashboard.css')}</style>"
        f'</head><body data-refresh="{refresh_s}"><header><a class="brand" href="/ui/">'
        f"millrace</a>{links}</header>{main}<script>{_asset('dashboard.js')}</script>"
        f"<script>{_asset('query.js')}</script>"
        "</body></html>"
    )


@functools.cache
def _asset(name: str) -> str:
    return (resources.files("millrace.api.dashboard") / "assets" / name).read_text("utf-8")
