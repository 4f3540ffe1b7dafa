"""The local Redis: one `redis-server` on loopback, its data, config and log in the workspace.

`millrace up` calls `start_redis`, `millrace down` calls `stop_redis`, `millrace status` calls
`redis_status`, as they do for the Kafka broker. The server runs detached, so it outlives the
command that started it; its pid file, `redis.conf`, snapshot (`dump.rdb`) and log live in
`<workspace>/redis/`. When `redis.url` (`MILLRACE_REDIS`) is set, none of this runs: the
serving tables live in that Redis.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from millrace.config.local_processes import live_command_line, loopback_port_is_free, stop_process
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.errors import ServingError

_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class RedisStatus:
    """What `millrace status` shows about the serving store."""

    url: str
    running: bool
    external: bool
    pid: int | None = None
    started_now: bool = False


def start_redis(workspace: Workspace) -> RedisStatus:
    """Start the workspace's Redis and wait until it answers PING.

    Starts nothing when `redis.url` points at an existing Redis, or when it already runs.
    Raises `ServingError` when `redis-server` is not installed, the port is taken, or the
    server exits or does not answer in 30 s (with the end of its log).
    """
    settings = workspace.settings
    current = redis_status(workspace)
    if current.external or current.running:
        return current
    executable = shutil.which("redis-server")
    if executable is None:
        raise ServingError(
            "redis-server is not installed, so the local serving store cannot start",
            hint="run scripts/setup.sh (Debian: apt-get install redis-server), or point "
            "MILLRACE_REDIS at an existing Redis",
        )
    _require_free_port(settings.redis_port)
    paths = _RedisPaths(workspace.redis_dir)
    paths.write_config(settings)
    process = subprocess.Popen(
        [executable, str(paths.config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    paths.pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + _START_TIMEOUT_S
    client = redis.Redis.from_url(settings.redis, socket_timeout=1.0)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            paths.pid_file.unlink(missing_ok=True)
            raise ServingError(
                f"redis-server exited with status {process.returncode} while starting; "
                f"the end of its log ({paths.log}):\n{paths.log_excerpt()}",
                hint="fix what the log names, then run `millrace up` again",
            )
        try:
            client.ping()
            return RedisStatus(settings.redis_address, True, False, process.pid, started_now=True)
        except redis.RedisError:
            time.sleep(0.1)
        finally:
            client.close()
    process.kill()
    paths.pid_file.unlink(missing_ok=True)
    raise ServingError(
        f"redis-server did not answer on {settings.redis_address} within {_START_TIMEOUT_S:.0f} s; "
        f"the end of its log ({paths.log}):\n{paths.log_excerpt()}",
        hint="fix what the log names, then run `millrace up` again",
    )


def stop_redis(workspace: Workspace) -> RedisStatus:
    """Stop the workspace's Redis (SIGTERM: it saves its snapshot, then exits); safe to repeat."""
    status = redis_status(workspace)
    if status.running and status.pid is not None:
        stop_process(status.pid, _STOP_GRACE_S)
    _RedisPaths(workspace.redis_dir).pid_file.unlink(missing_ok=True)
    return RedisStatus(status.url, False, status.external)


def redis_status(workspace: Workspace) -> RedisStatus:
    """Whether the workspace's Redis runs, judged by its pid file and its process."""
    settings = workspace.settings
    if not settings.uses_local_redis:
        return RedisStatus(settings.redis_address, True, True)
    pid = _RedisPaths(workspace.redis_dir).running_pid()
    return RedisStatus(settings.redis_address, pid is not None, False, pid)


class _RedisPaths:
    """The files of one local Redis, all under `<workspace>/redis/`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "redis.conf"
        self.pid_file = root / "redis.pid"
        self.log = root / "redis.log"

    def write_config(self, settings: Settings) -> None:
        """Write the server's configuration, readable by this user only: it may hold a password."""
        self.root.mkdir(parents=True, exist_ok=True)
        text = _REDIS_CONF.format(port=settings.redis_port, root=self.root, log=self.log)
        password = settings.redis_auth_password
        if password and settings.redis_user:
            # The ACL user may do everything; the default user, which needs no login, is off.
            text += "user default off\n"
            user, login = _quoted(settings.redis_user), _quoted(f">{password}")
            text += f"user {user} on {login} ~* &* +@all\n"
        elif password:
            text += f"requirepass {_quoted(password)}\n"
        self.config.touch(mode=0o600)
        self.config.chmod(0o600)
        self.config.write_text(text)

    def running_pid(self) -> int | None:
        """The server's pid if its process is alive and runs this workspace's configuration."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        # redis-server rewrites its process title to `redis-server 127.0.0.1:port`.
        if b"redis-server" in (live_command_line(pid) or b""):
            return pid
        return None

    def log_excerpt(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-25:]) or "(redis-server wrote no log)"


def _quoted(text: str) -> str:
    """`text` as one argument of a redis.conf line: double-quoted, backslash escapes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _require_free_port(port: int) -> None:
    if not loopback_port_is_free(port):
        raise ServingError(
            f"port {port} on 127.0.0.1 is in use by another process, so the local Redis "
            "cannot listen there",
            hint="stop that process, or choose a free port with redis.port in "
            "millrace.toml (or MILLRACE_REDIS_PORT)",
        )


_REDIS_CONF = """\
# Written by `millrace up`; rewritten at every start from millrace.toml.
bind 127.0.0.1
protected-mode yes
port {port}
daemonize no
dir {root}
dbfilename dump.rdb
logfile {log}
# Snapshot after 1000 changes in a minute or one change in 15 minutes, and at shutdown.
save 900 1 60 1000
"""
