"""Where an app's files live: checkpoints, result tables, the warehouse and at-most-once marks.

They live under one root, `storage.root` (`MILLRACE_STORAGE_ROOT`): the workspace folder when
it is empty, else a Hadoop filesystem URI that executors on other machines reach too,
`s3a://bucket/prefix` or `file:///shared/folder`. Below the root: `checkpoints/<app>/<query>/`,
`tables/<app>/<table>/` and `warehouse/`.

Spark reaches the root through Hadoop's S3A connector (configured in `millrace.engine.session`,
which keeps the keys off command lines). millrace's own readers, which run without Spark,
take a `StoragePath`: a `Path` on this machine's disk, or a `RemotePath`, which has the few
methods of `Path` they use, done with pyarrow's S3 filesystem; delta-rs takes
`delta_storage_options`. pyarrow is a dependency already (delta-rs reads into Arrow), is well
kept, and takes the endpoint and keys S3A takes, so no second S3 client is pinned. S3 keys
come from `storage.s3_access_key` and `storage.s3_secret_key`, or when those are empty from
each library's own AWS chain (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, a machine's role).
"""

from __future__ import annotations

import atexit
import fnmatch
import functools
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote, urlsplit

from millrace.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from pyarrow import fs as pafs

    from millrace.config.settings import Settings

SCHEMES = ("s3a", "file")
"""The URI schemes `storage.root` may have."""

_ROOT_HINT = (
    "set storage.root (MILLRACE_STORAGE_ROOT) to s3a://bucket/prefix or file:///shared/folder, "
    "or leave it empty to keep the files in the workspace"
)


def check_root_uri(uri: str) -> str:
    """`uri` without a trailing slash, when it is a root `storage.root` may name.

    Raises `ConfigError` saying what is wrong: an unknown scheme (`s3://` is Hadoop's old
    connector: `s3a://` is the one to name), no bucket, or a query or fragment.

    Example:
        >>> check_root_uri("s3a://millrace-data/prod/")
        's3a://millrace-data/prod'
    """
    if not uri:
        return uri
    parts = urlsplit(uri)
    if parts.scheme not in SCHEMES:
        guess = " (Hadoop's S3 connector is s3a://)" if parts.scheme in ("s3", "s3n") else ""
        raise ConfigError(
            f"storage.root {uri!r} is not an {' or '.join(s + '://' for s in SCHEMES)} URI{guess}",
            hint=_ROOT_HINT,
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"storage.root {uri!r} has a query or fragment", hint=_ROOT_HINT)
    if parts.scheme == "s3a" and not parts.netloc:
        raise ConfigError(f"storage.root {uri!r} names no bucket", hint=_ROOT_HINT)
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ConfigError(
            f"storage.root {uri!r} is not an absolute file URI (file:///folder)", hint=_ROOT_HINT
        )
    return uri.rstrip("/")


class FileStat(NamedTuple):
    """What `RemotePath.stat` tells, named as `os.stat_result` names it."""

    st_mtime: float
    st_size: int


@dataclass(frozen=True)
class RemotePath:
    """A file or folder under a storage root that is not on this machine's disk.

    `str()` gives the Hadoop URI Spark takes; the methods are the few of `pathlib.Path`, with
    the same signatures, that millrace's readers of checkpoints and tables use, done with
    pyarrow's filesystem of the root. An unreachable store raises `StorageError`; a missing
    file raises `FileNotFoundError`, as with a `Path`.

    Example:
        >>> root = storage_root(Path("/ws"), Settings(storage_root="s3a://data/prod"))
        >>> str(root / "checkpoints" / "top_events")
        's3a://data/prod/checkpoints/top_events'
    """

    settings: Settings = field(repr=False)
    key: str
    """`bucket/key` of the object, or of the prefix of the folder's objects."""

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(self.settings, posixpath.join(self.key, name))

    def __str__(self) -> str:
        return f"s3a://{self.key}"

    @property
    def name(self) -> str:
        """The last part of the key."""
        return posixpath.basename(self.key)

    @property
    def parent(self) -> RemotePath:
        """The folder that holds this one."""
        return RemotePath(self.settings, posixpath.dirname(self.key))

    def with_name(self, name: str) -> RemotePath:
        """The path beside this one named `name`."""
        return self.parent / name

    def exists(self) -> bool:
        """Whether a file or folder is there."""
        return self._info().type.name != "NotFound"

    def is_dir(self) -> bool:
        """Whether a folder is there: whether any object's key starts with this one's."""
        return self._info().type.name == "Directory"

    def is_file(self) -> bool:
        """Whether a file is there."""
        return self._info().type.name == "File"

    def stat(self) -> FileStat:
        """The file's modification time and size."""
        info = self._info()
        if info.type.name == "NotFound":
            raise FileNotFoundError(str(self))
        modified = info.mtime.timestamp() if info.mtime is not None else 0.0
        return FileStat(modified, info.size or 0)

    def iterdir(self) -> Iterator[RemotePath]:
        """What the folder holds; nothing when there is no folder."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.key, allow_not_found=True)
        for info in self._call(self._filesystem.get_file_info, selector):
            yield self / posixpath.basename(info.path.rstrip("/"))

    def glob(self, pattern: str) -> Iterator[RemotePath]:
        """The paths below this folder that match `pattern`, one `/`-separated part a level."""
        first, _, rest = pattern.partition("/")
        for child in self.iterdir():
            if fnmatch.fnmatchcase(child.name, first):
                if rest:
                    yield from child.glob(rest)
                else:
                    yield child

    def rglob(self, pattern: str) -> Iterator[RemotePath]:
        """The files below this folder, at any depth, whose name matches `pattern`.

        Only files: an object store keeps no folders, only keys that share a prefix.
        """
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=True)
        for info in self._call(self._filesystem.get_file_info, selector):
            if info.type.name == "File" and fnmatch.fnmatchcase(info.base_name, pattern):
                yield RemotePath(self.settings, info.path)

    def read_bytes(self) -> bytes:
        """The file's bytes."""
        stream = self._call(self._filesystem.open_input_stream, self.key)
        with stream:
            return bytes(stream.read())

    def read_text(self, encoding: str = "utf-8") -> str:
        """The file's text."""
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        """Write `data` to the file; an object store stores it whole or not at all."""
        stream = self._call(self._filesystem.open_output_stream, self.key)
        with stream:
            stream.write(data)
        return len(data)

    def write_text(self, data: str, encoding: str = "utf-8") -> int:
        """Write `data` to the file."""
        self.write_bytes(data.encode(encoding))
        return len(data)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing: an object store has no folders, only keys that share a prefix."""

    def replace(self, target: RemotePath) -> RemotePath:
        """Move this file to `target` (a copy, then a delete, on S3)."""
        self._call(self._filesystem.move, self.key, target.key)
        return target

    def unlink(self, missing_ok: bool = False) -> None:
        """Delete the file."""
        if missing_ok and not self.exists():
            return
        self._call(self._filesystem.delete_file, self.key)

    def delete_tree(self) -> None:
        """Delete this folder with every file below it; nothing when there is none."""
        if self.is_dir():
            self._call(self._filesystem.delete_dir, self.key)

    @property
    def _filesystem(self) -> pafs.S3FileSystem:
        return _s3_filesystem(self.settings)

    def _info(self) -> pafs.FileInfo:
        info: pafs.FileInfo = self._call(self._filesystem.get_file_info, self.key)
        return info

    def _call(self, method: Callable[..., Any], *arguments: Any) -> Any:
        try:
            return method(*arguments)
        except FileNotFoundError:
            raise
        except OSError as error:
            # pyarrow raises OSError for a refused login and an unreachable endpoint alike.
            raise StorageError(
                f"cannot reach {self}: {error}",
                hint="check storage.root and the storage.s3_* settings (or the AWS_* variables)",
            ) from None


StoragePath = Path | RemotePath
"""A file or folder under the storage root: a `Path` on this machine's disk, else a `RemotePath`.

Readers of checkpoints and tables take either, using the methods the two share."""


def storage_root(workspace_root: Path, settings: Settings) -> StoragePath:
    """The root of checkpoints, result tables and the warehouse: `storage.root` or the workspace.

    Example:
        >>> storage_root(Path("/ws"), Settings())
        PosixPath('/ws')
    """
    parts = urlsplit(settings.storage_root)
    if parts.scheme == "s3a":
        return RemotePath(settings, f"{parts.netloc}{parts.path}")
    return Path(parts.path) if parts.scheme == "file" else workspace_root


def listing(folder: StoragePath, pattern: str = "*") -> list[StoragePath]:
    """What `folder` holds that matches `pattern` (such as `*/0`: one part a level), sorted.

    Empty when there is no folder.

    Example:
        >>> (tmp_path / "top_events" / "table.top_events_5min").mkdir(parents=True)
        >>> [path.name for path in listing(tmp_path / "top_events")]
        ['table.top_events_5min']
    """
    if not folder.is_dir():
        return []
    found: list[StoragePath] = [*folder.glob(pattern)]
    return sorted(found, key=str)


def storage_path(uri: str, settings: Settings) -> StoragePath:
    """The path of a URI Spark resolved a location to: `file:/...` on the disk, or `s3a://...`.

    Example:
        >>> storage_path("file:/ws/checkpoints/app/q", Settings())
        PosixPath('/ws/checkpoints/app/q')
    """
    parts = urlsplit(uri)
    if parts.scheme == "s3a":
        return RemotePath(settings, unquote(f"{parts.netloc}{parts.path}"))
    return Path(unquote(parts.path))


def move(source: StoragePath, target: StoragePath) -> None:
    """Move the file or folder `source` to `target`, making `target`'s folder first.

    Both are on the disk, or both under the same remote root, where a folder moves file by
    file (S3 has no folders to rename).

    Example:
        >>> (tmp_path / "checkpoints" / "app" / "table.t").mkdir(parents=True)
        >>> move(tmp_path / "checkpoints" / "app" / "table.t", tmp_path / "backups" / "table.t")
        >>> (tmp_path / "backups" / "table.t").is_dir()
        True
    """
    if isinstance(source, Path) and isinstance(target, Path):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))
    elif isinstance(source, RemotePath) and isinstance(target, RemotePath):
        if source.is_file():
            source.replace(target)
            return
        for path in list(source.rglob("*")):
            path.replace(target / relative_to(path, source))
        source.delete_tree()  # pyarrow leaves an empty marker object for each emptied folder
    else:
        raise StorageError(
            f"cannot move {source} to {target}: one is on this machine's disk, one is not",
            hint="keep backups on the storage root of the checkpoints",
        )


def write_whole(path: StoragePath, text: str) -> None:
    """Write `text` to the file `path` so that a reader finds the old text or the new, whole.

    On the disk it is written beside and renamed over the file; an object store stores an
    object whole or not at all.

    Example:
        >>> write_whole(tmp_path / "pending_timers.json", "{}")
        >>> (tmp_path / "pending_timers.json").read_text()
        '{}'
    """
    if isinstance(path, Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.tmp")
        staged.write_text(text, encoding="utf-8")
        staged.replace(path)
    else:
        path.write_text(text)


def delete_tree(folder: StoragePath) -> None:
    """Delete `folder` with everything below it; nothing when it is not there.

    Example:
        >>> (tmp_path / "_feed_clicks" / "offsets").mkdir(parents=True)
        >>> delete_tree(tmp_path / "_feed_clicks")
        >>> (tmp_path / "_feed_clicks").exists()
        False
    """
    if isinstance(folder, Path):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        folder.delete_tree()


def relative_to(path: StoragePath, folder: StoragePath) -> str:
    """`path`'s part below `folder`, with `/` between parts.

    Example:
        >>> relative_to(Path("/ws/checkpoints/app/q"), Path("/ws/checkpoints"))
        'app/q'
    """
    return posixpath.relpath(str(path), str(folder))


def delta_storage_options(settings: Settings) -> dict[str, str]:
    """delta-rs's options for a table under an `s3a://` root; empty for a local one.

    Example:
        >>> delta_storage_options(Settings(storage_root="s3a://b", storage_s3_region="eu-west-1"))
        {'AWS_REGION': 'eu-west-1'}
    """
    if not settings.storage_root.startswith("s3a://"):
        return {}
    options = {"AWS_REGION": settings.storage_s3_region}
    if settings.storage_s3_endpoint:
        options["AWS_ENDPOINT_URL"] = settings.storage_s3_endpoint
        options["AWS_ALLOW_HTTP"] = str(settings.storage_s3_endpoint.startswith("http:")).lower()
    if settings.storage_s3_access_key:
        options["AWS_ACCESS_KEY_ID"] = settings.storage_s3_access_key
        options["AWS_SECRET_ACCESS_KEY"] = settings.s3_secret
    return options


def arrow_filesystem(folder: StoragePath) -> pafs.FileSystem:
    """The filesystem of pyarrow itself rooted at `folder`, for pyarrow to read the files below.

    delta-rs hands pyarrow a filesystem of Python callbacks unless given one; pyarrow's
    I/O threads, still prefetching when the reading process exits, then call into a
    finalizing interpreter and abort it ("terminate called without an active exception"):
    `millrace query` of a table under moto's S3 did so in 9 runs of 40, and in none of 40
    with this filesystem (2026-11-26).

    Example:
        >>> arrow_filesystem(Path("/ws/tables/top_events/per_5min")).base_path
        '/ws/tables/top_events/per_5min/'
    """
    from pyarrow import fs as pafs

    if isinstance(folder, Path):
        return pafs.SubTreeFileSystem(str(folder), pafs.LocalFileSystem())
    return pafs.SubTreeFileSystem(folder.key, _s3_filesystem(folder.settings))


@functools.cache
def _s3_filesystem(settings: Settings) -> pafs.S3FileSystem:
    """The S3 filesystem of the settings, made once per settings: each makes an S3 client."""
    from pyarrow import fs as pafs

    options: dict[str, Any] = {
        "region": settings.storage_s3_region,
        # A store that does not answer is an error within seconds, not a hang.
        "connect_timeout": 5,
        "request_timeout": 60,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
    }
    if settings.storage_s3_endpoint:
        endpoint = urlsplit(settings.storage_s3_endpoint)
        options["scheme"] = endpoint.scheme or "https"
        options["endpoint_override"] = endpoint.netloc or endpoint.path
    if settings.storage_s3_access_key:
        options["access_key"] = settings.storage_s3_access_key
        options["secret_key"] = settings.s3_secret
    atexit.register(_finalize_s3)
    return pafs.S3FileSystem(**options)


def _finalize_s3() -> None:
    """Drop the cached filesystems, then shut pyarrow's S3 support down, at exit.

    pyarrow's own exit handler finalizes S3 with this cache still holding a filesystem,
    which can abort a process after its work (apache/arrow#41087). Registered after
    pyarrow's handler, this one runs before it.
    """
    from pyarrow import fs as pafs

    _s3_filesystem.cache_clear()
    pafs.finalize_s3()
