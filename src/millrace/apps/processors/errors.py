"""The errors a processor run raises on Spark, and how they get from a worker to the driver.

A processor's input or output stream that does not exist is a `ProcessorError` naming its
role (`require_processor_stream`). A `ProcessorError` raised in a Python worker (a callback's
failure, a processing-time timer in a batch run) reaches the driver only as the text of
Spark's exception: `worker_error_text` puts its fields, as JSON after a mark, into the text
the worker raises, and `processor_error_in` finds them in the driver's exception and makes
the `ProcessorError` again, so that the user sees its message and hint and not Spark's trace.
A worker that Spark could not start in time is a `ProcessorError` too (`worker_start_error`).
Streaming (`millrace.apps.processors.streaming`) and batch runs (`millrace.apps.processors.batch`)
share them.

Example:
    >>> text = worker_error_text(ProcessorError("bad key", hint="give a key"))
    >>> processor_error_in("Job aborted: " + text).hint
    'give a key'
"""

from __future__ import annotations

import json

from millrace.bus.streams import require_stream
from millrace.config.workspace import Workspace
from millrace.errors import ProcessorError, StreamNotFoundError
from millrace.processor.processor import Processor

# This mark starts a worker's error fields in the text of Spark's exception.
_WORKER_ERROR_MARK = "millrace-processor-error:"
# Spark's words when a Python worker it started did not connect back in time.
_WORKER_START_FAILED = "Python worker failed to connect back"


def require_processor_stream(workspace: Workspace, stream: str, role: str) -> int:
    """The bucket count of `stream`; `ProcessorError` naming its `role` when it does not exist."""
    try:
        return require_stream(workspace.settings, stream)
    except StreamNotFoundError as error:
        raise ProcessorError(
            f"stream {stream!r}, {role}, does not exist",
            hint=f"create it with `millrace stream create {stream}` and start the app again",
        ) from error


def require_inputs(workspace: Workspace, processor: type[Processor]) -> None:
    """`ProcessorError` naming the first input of `processor` whose stream does not exist."""
    for source in processor.inputs:
        require_processor_stream(workspace, source.stream, f"input of processor {processor.name!r}")


def worker_error_text(error: ProcessorError) -> str:
    """The text a Python worker raises for `error`, for `processor_error_in` on the driver.

    Example:
        >>> worker_error_text(ProcessorError("bad key", hint="give a key"))
        'millrace-processor-error:{"message": "bad key", "hint": "give a key"}'
    """
    return _WORKER_ERROR_MARK + json.dumps({"message": error.message, "hint": error.hint})


def worker_start_error(text: str, processor: str) -> ProcessorError | None:
    """The `ProcessorError` for a Python worker that did not start in time, from Spark's text.

    Spark waits a fixed 10 s for a Python worker it starts to connect back (not a setting),
    and on a machine too busy for that fails the query with its own raw error. None when the
    text is about something else.

    Example:
        >>> error = worker_start_error("Python worker failed to connect back.", "zeitgeist")
        >>> error.message
        "a Python worker of processor 'zeitgeist' did not start within Spark's 10 s"
    """
    if _WORKER_START_FAILED not in text:
        return None
    return ProcessorError(
        f"a Python worker of processor {processor!r} did not start within Spark's 10 s",
        hint="the machine was too busy for it; start the app again (its checkpoint keeps its "
        "place, nothing is lost), and give the machine fewer apps or more cores",
    )


def processor_error_in(text: str) -> ProcessorError | None:
    """The `ProcessorError` a Python worker raised, from the text of the failed query's error.

    None when the text holds none (the failure is Spark's or another's).

    Example:
        >>> processor_error_in("java.lang.OutOfMemoryError") is None
        True
    """
    start = text.find(_WORKER_ERROR_MARK)
    if start < 0:
        return None
    try:
        fields, _ = json.JSONDecoder().raw_decode(text, start + len(_WORKER_ERROR_MARK))
    except json.JSONDecodeError:
        return None
    return ProcessorError(fields["message"], hint=fields["hint"])
