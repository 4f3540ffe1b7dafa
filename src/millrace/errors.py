"""The millrace error hierarchy: every failure a user can act on is a `MillraceError`.

Each error carries a stable `code`, a message that says what was wrong and where, and a
`hint` that says what to do. The CLI prints `error[code]: message` and the hint, with no
traceback; later the HTTP API renders the same fields as JSON. `import_failure` turns an
exception raised while importing a user's module (a processor's file, a SQL app's function
module) into one, named at the module's line.
"""

from __future__ import annotations

import traceback


class MillraceError(Exception):
    """Base class of every error millrace raises on purpose.

    Example:
        >>> error = ConfigError("unknown key 'kafka.prot'", hint="did you mean 'kafka.port'?")
        >>> error.code, str(error)
        ('config', "unknown key 'kafka.prot'")
    """

    code = "millrace"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """The text the CLI prints: the message, then the hint on its own line."""
        text = f"error[{self.code}]: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class ConfigError(MillraceError):
    """A setting in `millrace.toml` or the environment is unknown or has a bad value."""

    code = "config"


class SetupError(MillraceError):
    """Something the setup step installs is missing: Java, the resolved jars, a package."""

    code = "setup"


class StorageError(MillraceError):
    """The storage root of checkpoints and tables (`storage.root`) cannot be reached."""

    code = "storage"


class BrokerError(MillraceError):
    """The local Kafka broker could not be started, reached or stopped."""

    code = "broker"


class BusError(MillraceError):
    """A Kafka operation on the bus failed."""

    code = "bus"


class StreamNameError(BusError):
    """A stream name or a stream setting is not valid."""

    code = "stream-invalid"


class StreamNotFoundError(BusError):
    """The named stream does not exist on the bus."""

    code = "stream-not-found"


class StreamExistsError(BusError):
    """A stream of that name already exists."""

    code = "stream-exists"


class PublishError(BusError):
    """An event could not be encoded or was not acknowledged by the bus."""

    code = "publish"


class DeliveryError(PublishError):
    """`count` events the bus did not store (a broker failure, a timeout).

    `record_ids` names them when the publisher tracked ids. An event that timed out may
    have been stored all the same: send it again with the same record id, and readers drop
    the copy.
    """

    def __init__(
        self,
        message: str,
        *,
        count: int,
        record_ids: tuple[str, ...] = (),
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.count = count
        self.record_ids = record_ids


class SchemaError(MillraceError):
    """A declared schema or time column is not valid."""

    code = "schema"


class SqlError(MillraceError):
    """A SQL app or query is not valid; the message starts with `file:line:column`."""

    code = "sql"


class QueryLimitError(SqlError):
    """An ad-hoc query went over its time limit or its row limit and was stopped."""

    code = "sql-limit"


class QueryTooBigError(SqlError):
    """An ad-hoc query's tables hold more than the engine in this process may read."""

    code = "sql-size"


class EngineError(MillraceError):
    """Spark could not be started or a streaming query could not be built."""

    code = "engine"


class DiskFullError(EngineError):
    """An app stopped because a disk it writes to (checkpoint, tables, workspace) is full."""

    code = "disk-full"


class ProcessorError(MillraceError):
    """A processor class is not valid, or its code failed on a record or a timer."""

    code = "processor"


class ServingError(MillraceError):
    """The serving store (Redis) could not be started or reached, or a write to it failed."""

    code = "serving"


class TableNotFoundError(ServingError):
    """The named serving table does not exist."""

    code = "table-not-found"


class RowNotFoundError(ServingError):
    """A serving table holds no row with the key asked for (never written, or expired)."""

    code = "row-not-found"


class TableSpecError(ServingError):
    """A serving table's name, columns, types or TTL are not valid, or it exists already."""

    code = "table-invalid"


class WarehouseError(MillraceError):
    """A warehouse table is missing, or a backfill or ad-hoc query cannot run as asked."""

    code = "warehouse"


class AppNotFoundError(MillraceError):
    """No app of that name is registered, has a checkpoint, or published a batch lately."""

    code = "app-not-found"


class LifecycleError(MillraceError):
    """A deployed app could not be started, stopped or rolled back as asked."""

    code = "lifecycle"


class StateSchemaError(LifecycleError):
    """An app's new code needs state that its checkpoint cannot give it."""

    code = "state-schema"


class ResultTableNotFoundError(SqlError):
    """A SQL app's result table does not exist (yet)."""

    code = "result-table-not-found"


class AlreadyDeployedError(LifecycleError):
    """An app deployed and running already was deployed again; `app` names it."""

    def __init__(self, message: str, *, app: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.app = app


class AppRunningError(LifecycleError):
    """Another driver runs the app already: a second one on its checkpoint is refused."""

    code = "app-running"


class CheckpointError(LifecycleError):
    """An app's checkpoint cannot be used as it is: missing or unreadable."""

    code = "checkpoint"


class CheckpointMissingError(CheckpointError):
    """Queries that ran before have lost their checkpoints: they would start over silently."""

    code = "checkpoint-missing"


class CheckpointCorruptError(CheckpointError):
    """A file of a query's checkpoint (its offsets or commits log) cannot be read."""

    code = "checkpoint-corrupt"


def import_failure(
    error: Exception, source: str, error_type: type[MillraceError], *, context: str = ""
) -> MillraceError:
    """The error for importing the user's module `source` raising `error`: where, and why.

    A syntax error is named at its file:line:column, with the line; an exception of the
    module's top level at the line that raised it. A `MillraceError` stays as it is. `context`
    starts the message (such as the place of the statement that named the module).

    Example:
        >>> try:
        ...     compile("x = (", "limits.py", "exec")
        ... except SyntaxError as error:
        ...     print(import_failure(error, "limits.py", SqlError).message)
        limits.py:1:5: SyntaxError: '(' was never closed
            x = (
    """
    if isinstance(error, MillraceError):
        return error
    if isinstance(error, SyntaxError):
        column = f":{error.offset}" if error.offset else ""
        shown = f"\n    {error.text.rstrip()}" if error.text and error.text.strip() else ""
        return error_type(
            f"{context}{error.filename}:{error.lineno}{column}: {type(error).__name__}: "
            f"{error.msg}{shown}",
            hint=f"fix the Python there; `python -m py_compile {error.filename}` checks a file "
            "without running it",
        )
    frames = traceback.extract_tb(error.__traceback__)
    importing = [n for n, frame in enumerate(frames) if frame.filename.startswith("<frozen")]
    # The frame after importlib's last one is the line of the module's top level that raised.
    line = frames[importing[-1] + 1] if importing and importing[-1] + 1 < len(frames) else None
    place = f"{line.filename}:{line.lineno}: " if line else ""
    return error_type(
        f"{context}{place}loading {source} raised {type(error).__name__}: {error}",
        hint="fix the code that runs when the module is imported (its top level)",
    )
