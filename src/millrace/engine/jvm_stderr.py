"""Spark's JVM output, relayed to this process's stderr without PySpark's worker chatter.

When a processor's query starts, Spark runs PySpark's TransformWithStateInPandas driver
worker, whose plain `print`s ("Streaming TransformWithStateInPandas Python worker ...": the
UDF it received, the state server's port, its start and end) the JVM copies to its stderr:
ten lines a query start, on the user's terminal. No setting routes them elsewhere, so the
JVM is started with a pipe as its stderr, and a thread of this process copies each line of
it to this process's stderr, except those lines and the blank line each `print` adds. Every
other line (Spark's errors and their stacks, a Python worker's traceback) is copied as it is.
Only the JVM writes into the pipe: what this process prints while the JVM starts (from
another thread, as the JVM may start in the background) goes to its stderr at once.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import termios
import threading
import time
from collections.abc import Iterator

_CHATTER = (
    b"Starting Streaming TransformWithStateInPandas Python worker",
    b"Streaming TransformWithStateInPandas Python worker ",
)
_DRAIN_WAIT_S = 1.0


@contextlib.contextmanager
def relayed_stderr() -> Iterator[int]:
    """A stderr for processes started inside, copied to ours less the worker chatter.

    It gives the file descriptor to start them with, as `subprocess.Popen(..., stderr=it)`.
    """
    read_end, write_end = os.pipe()
    try:
        yield write_end
    finally:
        os.close(write_end)
    relay = _Relay(read_end)
    relay.start()
    # The JVM ends after this process: at exit, copy what it has written so far.
    atexit.register(relay.drain)


class _Relay(threading.Thread):
    def __init__(self, source: int) -> None:
        super().__init__(name="millrace-jvm-stderr", daemon=True)
        self._source = source
        self._lock = threading.Lock()
        self._partial = b""
        self._after_chatter = False

    def run(self) -> None:
        while chunk := os.read(self._source, 65536):
            with self._lock:
                self._copy(chunk)
        with self._lock:
            self._copy_partial()
        os.close(self._source)

    def drain(self) -> None:
        deadline = time.monotonic() + _DRAIN_WAIT_S
        while self.is_alive() and _pending(self._source) and time.monotonic() < deadline:
            time.sleep(0.02)
        # A chunk read just now is copied under the lock: wait for it, not the thread's end.
        time.sleep(0.05)
        with self._lock:
            self._copy_partial()

    def _copy(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        kept = [line + b"\n" for line in lines if self._keeps(line)]
        if kept:
            _write_all(b"".join(kept))

    def _copy_partial(self) -> None:
        if self._partial and not self._partial.startswith(_CHATTER):
            _write_all(self._partial)
        self._partial = b""

    def _keeps(self, line: bytes) -> bool:
        if line.startswith(_CHATTER):
            self._after_chatter = True
            return False
        # Each chatter line ends with a newline of its own before print's: one blank line.
        if self._after_chatter and not line.strip():
            self._after_chatter = False
            return False
        self._after_chatter = False
        return True


def _pending(source: int) -> int:
    try:
        waiting = bytearray(4)
        fcntl.ioctl(source, termios.FIONREAD, waiting)
    except OSError:
        return 0
    return int.from_bytes(waiting, "little")


def _write_all(data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data) :]
