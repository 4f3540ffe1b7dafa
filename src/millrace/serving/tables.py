"""Serving tables: key-value tables in Redis, fed from streams and apps, read by key (Laser).

A table has key columns, value columns and an optional TTL. Its spec is registered in Redis
(hash `millrace:tables`, one JSON spec per table), so every process that reaches the Redis
(the CLI, apps on any executor, the HTTP API) sees the same tables. Each row is one Redis
string `millrace:t:<table>:<key>` holding the row (key and value columns) as a JSON object,
written with `SET ... PX ttl`: a write is an upsert of the whole row, so writing the same rows
again leaves the table as it was, and the TTL starts again at every write of the row.

The key of a row is the text of its key column; with several key columns, the JSON array of
their texts. Texts are the values as Spark casts them to STRING: `42`, `1.5`, `true`, `abc`.

Reads go in one round trip for any number of keys (MGET). `lookup_rows` adds a small
per-process cache with a bounded age, the Joiner's cache from the paper: lookups from one
executor for a hot key reach Redis once per `max_age_s`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

import redis

from millrace.config.settings import Settings
from millrace.config.uris import without_password
from millrace.errors import ServingError, TableNotFoundError, TableSpecError
from millrace.records import JsonObject

SIMPLE_TYPES = ("STRING", "BIGINT", "INT", "DOUBLE", "FLOAT", "BOOLEAN")
"""Column types a table created from the command line may declare (STRING when none)."""

SPECS_KEY = "millrace:tables"
"""The Redis hash of table specs: table name -> the spec as JSON."""

_ROW_PREFIX = "millrace:t:"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PIPELINE_ROWS = 5_000
_CACHE_MAX_ENTRIES = 200_000


@dataclass(frozen=True)
class TableSpec:
    """A serving table: its name, key and value columns (name, Spark SQL type), TTL and feed.

    `ttl_ms` None keeps rows until they are overwritten or the table is dropped. `stream` names
    the stream that feeds the table when it was created with `--from-stream`; `feeder` says
    who writes it, for people reading `millrace table list`.

    Example:
        >>> TableSpec("t", (("k", "STRING"),), (("v", "BIGINT"),)).columns
        ('k', 'v')
    """

    name: str
    keys: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...]
    ttl_ms: int | None = None
    stream: str | None = None
    feeder: str = ""
    created_ms: int = field(default=0, compare=False)

    @property
    def columns(self) -> tuple[str, ...]:
        """Names of the key columns, then of the value columns."""
        return tuple(name for name, _ in self.keys + self.values)

    @property
    def key_names(self) -> tuple[str, ...]:
        """Names of the key columns."""
        return tuple(name for name, _ in self.keys)

    def to_json(self) -> str:
        """The spec as the JSON text the registry keeps."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> TableSpec:
        """The spec that `to_json` wrote."""
        fields = json.loads(text)
        fields["keys"] = tuple(tuple(column) for column in fields["keys"])
        fields["values"] = tuple(tuple(column) for column in fields["values"])
        return cls(**fields)

    def validate(self) -> TableSpec:
        """This spec; `TableSpecError` for a bad name, no key, a repeated column or bad TTL."""
        if not _NAME.match(self.name):
            raise TableSpecError(
                f"table name {self.name!r} is not valid",
                hint="use letters, digits and underscores, starting with a letter",
            )
        if not self.keys:
            raise TableSpecError(
                f"table {self.name!r} has no key column",
                hint="name at least one key column, such as --key dimension_id",
            )
        seen: set[str] = set()
        for column, kind in self.keys + self.values:
            if not _NAME.match(column) or column in seen or not kind:
                raise TableSpecError(
                    f"table {self.name!r}: column {column!r} is repeated, has no type or is "
                    "not a valid name",
                    hint="give each column its own name of letters, digits and underscores",
                )
            seen.add(column)
        if self.ttl_ms is not None and self.ttl_ms <= 0:
            raise TableSpecError(
                f"table {self.name!r}: TTL {self.ttl_ms} ms is not positive",
                hint="give a TTL such as 7d or 10m, or none to keep rows",
            )
        return self


def parse_column(text: str, *, what: str = "column") -> tuple[str, str]:
    """`name` or `name:TYPE` as (name, TYPE); a column without a type is a STRING.

    Example:
        >>> parse_column("score:double")
        ('score', 'DOUBLE')
    """
    name, _, kind = text.partition(":")
    kind = (kind or "STRING").strip().upper()
    if kind not in SIMPLE_TYPES:
        raise TableSpecError(
            f"{what} {text!r}: type {kind!r} is not one a table can declare",
            hint=f"write name or name:TYPE with TYPE one of {', '.join(SIMPLE_TYPES)}",
        )
    return name.strip(), kind


def create_table(settings: Settings, spec: TableSpec, *, replace: bool = False) -> TableSpec:
    """Register `spec`; `TableSpecError` when a table of that name exists with another spec.

    Registering the same spec again is a no-op, so an app can declare its table at every
    start. `replace=True` overwrites a different spec (the rows stay).
    """
    spec.validate()
    if not spec.created_ms:
        spec = TableSpec(**{**asdict(spec), "created_ms": int(time.time() * 1000)})
    client = _client(settings.redis)
    with _errors(settings.redis):
        existing = client.hget(SPECS_KEY, spec.name)
        if existing is not None and not replace:
            current = TableSpec.from_json(existing)
            if current == spec:
                return current
            raise TableSpecError(
                f"serving table {spec.name!r} exists with other columns, TTL or feed: "
                f"{_describe(current)}",
                hint=f"delete it first (`millrace table delete {spec.name}`), or choose "
                "another name",
            )
        client.hset(SPECS_KEY, spec.name, spec.to_json())
    return spec


def drop_table(settings: Settings, name: str) -> int:
    """Remove table `name` and all its rows; the number of rows removed.

    Raises `TableNotFoundError` when there is no such table.
    """
    describe_table(settings, name)
    client = _client(settings.redis)
    removed = 0
    with _errors(settings.redis):
        client.hdel(SPECS_KEY, name)
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{_ROW_PREFIX}{name}:*", count=10_000):
            batch.append(key)
            if len(batch) >= 10_000:
                removed += client.unlink(*batch)
                batch = []
        if batch:
            removed += client.unlink(*batch)
    _drop_cached(name)
    return removed


def list_tables(settings: Settings) -> list[TableSpec]:
    """Every registered table, by name."""
    client = _client(settings.redis)
    with _errors(settings.redis):
        specs = client.hgetall(SPECS_KEY)
    return sorted((TableSpec.from_json(text) for text in specs.values()), key=lambda s: s.name)


def describe_table(settings: Settings, name: str) -> TableSpec:
    """The spec of table `name`; `TableNotFoundError` (with the known names) when there is none."""
    client = _client(settings.redis)
    with _errors(settings.redis):
        text = client.hget(SPECS_KEY, name)
        if text is None:
            known = sorted(
                raw.decode() if isinstance(raw, bytes) else raw for raw in client.hkeys(SPECS_KEY)
            )
    if text is None:
        raise TableNotFoundError(
            f"serving table {name!r} does not exist",
            hint=(f"known tables: {', '.join(known)}" if known else "there are no tables yet")
            + "; create one with `millrace table create`",
        )
    return TableSpec.from_json(text)


def count_rows(settings: Settings, name: str) -> int:
    """The rows table `name` holds now (a scan of its keys: for tests and small tables)."""
    client = _client(settings.redis)
    with _errors(settings.redis):
        return sum(1 for _ in client.scan_iter(match=f"{_ROW_PREFIX}{name}:*", count=10_000))


def get_row(settings: Settings, table: str, key: object) -> JsonObject | None:
    """The row of `table` with key `key` (a value, or a sequence with one per key column).

    None when the table holds no such row (never written, or expired). Raises
    `TableNotFoundError` for an unknown table.
    """
    return get_rows(settings, table, [key])[0]


def get_rows(settings: Settings, table: str, keys: Iterable[object]) -> list[JsonObject | None]:
    """The rows of `table` for `keys`, in their order, in one round trip; None where missing."""
    spec = describe_table(settings, table)
    texts = [key_text(spec, key) for key in keys]
    return _fetch(settings.redis, spec.name, texts)


def write_rows(url: str, spec: TableSpec, columns: Mapping[str, Sequence[object]]) -> int:
    """Upsert rows given as columns (name -> values, the spec's columns) into the table at `url`.

    Rows go to Redis in pipelined batches of SETs, with the table's TTL; rows whose key holds
    a null are skipped. Within the rows given, a later row of a key wins. The number written.
    """
    names = spec.columns
    key_count = len(spec.keys)
    prefix = f"{_ROW_PREFIX}{spec.name}:".encode()
    # Each SET is packed here in Redis's protocol, once: redis-py's own pipeline packs every
    # command through several layers of Python, and costs five times as much per row.
    if spec.ttl_ms is None:
        head, tail = b"*3\r\n$3\r\nSET\r\n", b""
    else:
        ttl = str(spec.ttl_ms).encode()
        head = b"*5\r\n$3\r\nSET\r\n"
        tail = b"$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl)
    client = _client(url)
    written = 0
    commands: list[bytes] = []
    with _errors(url):
        for row in zip(*(columns[name] for name in names), strict=True):
            keys = row[:key_count]
            if any(part is None for part in keys):
                continue
            key = prefix + _key_text_of(keys).encode()
            value = json.dumps(
                dict(zip(names, row, strict=True)),
                separators=(",", ":"),
                ensure_ascii=False,
                default=_json_default,
            ).encode()
            commands.append(
                b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (head, len(key), key, len(value), value, tail)
            )
            if len(commands) >= _PIPELINE_ROWS:
                written += _send(client, commands)
                commands = []
        if commands:
            written += _send(client, commands)
    return written


def _send(client: redis.Redis, commands: list[bytes]) -> int:
    """Send packed commands in one write, then read their replies; the number sent."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        # redis-py leaves the methods of its connections unannotated.
        connection.send_packed_command([b"".join(commands)])  # type: ignore[no-untyped-call]
        failure = None
        for _ in commands:
            # Every reply is read, even after an error, so the connection stays in step.
            try:
                connection.read_response()
            except redis.ResponseError as error:
                failure = failure or error
        if failure is not None:
            raise failure
    except BaseException:
        connection.disconnect()  # type: ignore[no-untyped-call]
        raise
    finally:
        pool.release(connection)
    return len(commands)


def lookup_rows(
    url: str, spec: TableSpec, keys: Sequence[object], *, max_age_s: float
) -> list[JsonObject | None]:
    """The rows for `keys` through this process's cache; the misses in one round trip (MGET).

    A cached row, or a cached miss, is used for `max_age_s` seconds after it was read; 0
    reads every key from Redis. Each key is a value, or a sequence with one per key column.
    """
    texts = [None if _has_null(key) else key_text(spec, key) for key in keys]
    if max_age_s <= 0:
        wanted = sorted({text for text in texts if text is not None})
        found = dict(zip(wanted, _fetch(url, spec.name, wanted), strict=True))
        return [None if text is None else found[text] for text in texts]
    cache = _cache(url, spec.name)
    now = time.monotonic()
    rows: dict[str, JsonObject | None] = {}
    misses: list[str] = []
    with cache.lock:
        for text in texts:
            if text is None or text in rows:
                continue
            entry = cache.entries.get(text)
            if entry is not None and now - entry[0] < max_age_s:
                rows[text] = entry[1]
            else:
                rows[text] = None
                misses.append(text)
    if misses:
        fetched = _fetch(url, spec.name, misses)
        with cache.lock:
            if len(cache.entries) + len(misses) > _CACHE_MAX_ENTRIES:
                cache.entries.clear()
            for text, row in zip(misses, fetched, strict=True):
                rows[text] = row
                cache.entries[text] = (now, row)
    return [None if text is None else rows[text] for text in texts]


def key_text(spec: TableSpec, key: object) -> str:
    """The text a key is stored under: its value's text, or a JSON array for several columns.

    Example:
        >>> key_text(TableSpec("t", (("a", "BIGINT"), ("b", "STRING")), ()), (1, "x"))
        '["1","x"]'
    """
    if isinstance(key, Mapping):
        parts = tuple(key.get(name) for name in spec.key_names)
    elif isinstance(key, list | tuple):
        parts = tuple(key)
    else:
        parts = (key,)
    if len(parts) != len(spec.keys):
        raise TableSpecError(
            f"table {spec.name!r} has key columns {', '.join(spec.key_names)}, and the key "
            f"{key!r} gives {len(parts)} value(s)",
            hint="give one value per key column, in their order",
        )
    return _key_text_of(parts)


def _key_text_of(parts: Sequence[object]) -> str:
    if len(parts) == 1:
        return _part_text(parts[0])
    return json.dumps([_part_text(part) for part in parts], separators=(",", ":"))


def _part_text(value: object) -> str:
    # As Spark's CAST(x AS STRING), so a key written from Spark and one typed on the command
    # line meet: booleans are lowercase, whole doubles keep their `.0`.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # Spark's session time zone is UTC
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    return str(value)


def _has_null(key: object) -> bool:
    if isinstance(key, list | tuple):
        return any(part is None for part in key)
    return key is None


def _fetch(url: str, table: str, texts: Sequence[str]) -> list[JsonObject | None]:
    if not texts:
        return []
    prefix = f"{_ROW_PREFIX}{table}:"
    with _errors(url):
        found = _client(url).mget([prefix + text for text in texts])
    return [None if raw is None else json.loads(raw) for raw in found]


def _json_default(value: object) -> object:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _describe(spec: TableSpec) -> str:
    keys = ", ".join(f"{name} {kind}" for name, kind in spec.keys)
    values = ", ".join(f"{name} {kind}" for name, kind in spec.values) or "none"
    ttl = f"{spec.ttl_ms} ms" if spec.ttl_ms else "none"
    return f"keys {keys}; values {values}; TTL {ttl}; stream {spec.stream or 'none'}"


@dataclass
class _Cache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    entries: dict[str, tuple[float, JsonObject | None]] = field(default_factory=dict)


_clients: dict[str, redis.Redis] = {}
_caches: dict[tuple[str, str], _Cache] = {}
_registry_lock = threading.Lock()


def _client(url: str) -> redis.Redis:
    """One connection pool per Redis URL and process (an executor's Python worker reuses it)."""
    with _registry_lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(url, socket_timeout=30.0, socket_connect_timeout=5.0)
            _clients[url] = client
        return client


def _cache(url: str, table: str) -> _Cache:
    with _registry_lock:
        return _caches.setdefault((url, table), _Cache())


def _drop_cached(table: str) -> None:
    with _registry_lock:
        for key in [key for key in _caches if key[1] == table]:
            del _caches[key]


class _errors:  # noqa: N801 - used as a `with` block, like contextlib's lowercase helpers
    """Turns redis-py's connection errors into a `ServingError` naming the Redis URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: TracebackType | None
    ) -> Literal[False]:
        if isinstance(error, redis.AuthenticationError):
            user = urlsplit(self.url).username or "default"
            raise ServingError(
                f"Redis at {without_password(self.url)} refused the login of user {user!r}: "
                f"{error}",
                hint="check redis.user and the password (MILLRACE_REDIS_PASSWORD or "
                "redis.password_file)",
            ) from None
        if isinstance(error, redis.ConnectionError | redis.TimeoutError):
            raise ServingError(
                f"cannot reach Redis at {without_password(self.url)}: {error}",
                hint="start the local one with `millrace up`, or point MILLRACE_REDIS at a "
                "running Redis",
            ) from None
        if isinstance(error, redis.RedisError):
            raise ServingError(
                f"Redis at {without_password(self.url)} refused a command: {error}",
                hint="check that it is a Redis 6 or newer, with memory to spare",
            ) from None
        return False
