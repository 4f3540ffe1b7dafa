"""The logs of deployed apps and of the host, kept to a bounded size by rotation.

An app's log (`<workspace>/apps/<app>/app.log`) and the host's (`<workspace>/host/host.log`)
are appended to by the process that runs them: millrace's own lines, and what Spark's JVM and
Python workers print to the output they share with it. Whoever writes millrace's lines calls
`rotate_if_large` after each; once the file has reached `logs.max_mb`, the older copies move
up by one (app.log.1 to app.log.2, up to `logs.keep`), the file is copied to app.log.1 and
emptied in place. Emptied, not renamed: the JVM and the workers hold the file open for
appending, and must go on writing to the log that `millrace logs` reads. What they write
between the copy and the emptying, a few milliseconds, is lost.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from millrace.config.settings import Settings

_ROTATING = threading.Lock()


def rotate_if_large(path: Path, settings: Settings) -> bool:
    """Rotate the log at `path` if it has reached `logs.max_mb`; whether it did.

    Example:
        >>> log = tmp_path / "app.log"
        >>> _ = log.write_text("x" * 2**20)
        >>> rotate_if_large(log, Settings(logs_max_mb=1, logs_keep=2))
        True
        >>> log.stat().st_size, (tmp_path / "app.log.1").stat().st_size
        (0, 1048576)
    """
    with _ROTATING:
        try:
            if path.stat().st_size < settings.logs_max_mb * 2**20:
                return False
        except FileNotFoundError:
            return False
        if settings.logs_keep:
            for number in range(settings.logs_keep - 1, 0, -1):
                older = _rotated(path, number)
                if older.exists():
                    older.replace(_rotated(path, number + 1))
            shutil.copyfile(path, _rotated(path, 1))
        os.truncate(path, 0)
        return True


def _rotated(path: Path, number: int) -> Path:
    """The `number`th rotated copy of the log at `path` (app.log.2), 1 the newest."""
    return path.with_name(f"{path.name}.{number}")
