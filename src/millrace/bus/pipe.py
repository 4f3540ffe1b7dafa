"""Piping a stream into a command, the paper's Swift feeding a shell script.

Records go to the command's standard input as JSON lines (the record's value), read through a
checkpointed `Reader`. A checkpoint covers records already written into the pipe; when the
command fails or stops reading, no further checkpoint is taken, so the records since the last
one are piped again on the next run (at-least-once).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import dataclass
from typing import IO, cast

from millrace.bus.reader import Reader
from millrace.config.settings import Settings
from millrace.errors import BusError


@dataclass(frozen=True)
class PipeResult:
    """How a pipe run ended."""

    records: int
    dead_letters: int
    exit_code: int


def pipe_to_command(
    stream: str,
    group: str,
    command: list[str],
    *,
    settings: Settings | None = None,
    checkpoint_every: int = 1000,
    follow: bool = False,
) -> PipeResult:
    """Write the records of `stream` to `command`'s stdin, one JSON line each.

    Ends at the end of the stream (or, with `follow`, when the command exits). Returns the
    record count and the command's exit code; a command that cannot start is a `BusError`.
    """
    reader = Reader(
        stream, group, settings=settings, checkpoint_every=checkpoint_every, follow=follow
    )
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE)
    except OSError as error:
        reader.close(checkpoint=False)
        raise BusError(
            f"cannot start {command[0]!r}: {error.strerror}", hint="check the command after `--`"
        ) from None
    stdin = cast(IO[bytes], process.stdin)
    records = 0
    completed = False
    try:
        for record in reader:
            stdin.write(json.dumps(record.value, ensure_ascii=False).encode() + b"\n")
            stdin.flush()
            records += 1
        completed = True
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            stdin.close()
    exit_code = process.wait()
    reader.close(checkpoint=completed and exit_code == 0)
    return PipeResult(records, reader.dead_letter_count, exit_code)
