"""Where an app's files live: checkpoints, result tables, the warehouse and at-most-once marks.

They live under one root, `storage.root` (`MILLRACE_STORAGE_ROOT`): the workspace folder when
it is empty, else a Hadoop filesystem URI that executors on other machines reach too,
`s3a://bucket/prefix`, `hdfs://namenode:port/prefix` or `file:///shared/folder`. Below the
root: `checkpoints/<app>/<query>/`, `tables/<app>/<table>/` and `warehouse/`.

Spark reaches the root through Hadoop's own connectors: S3A (configured in
`millrace.engine.session`, which keeps the keys off command lines) and the HDFS client in
PySpark's hadoop-client jars. millrace's own readers, which run without Spark, take a
`StoragePath`: a `Path` on this machine's disk, or a `RemotePath`, which has the few methods
of `Path` they use, done by the root's store: pyarrow's S3 filesystem for `s3a://`, and
hdfs-native's client for `hdfs://`. delta-rs takes `delta_storage_options`.

pyarrow is a dependency already (delta-rs reads into Arrow), is well kept, and takes the
endpoint and keys S3A takes, so no second S3 client is pinned. S3 keys come from
`storage.s3_access_key` and `storage.s3_secret_key`, or when those are empty from each
library's own AWS chain (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, a machine's role).

For HDFS, pyarrow's own filesystem loads libhdfs into a JVM, which millrace's readers do not
start; hdfs-native (pinned) is a client in Rust that speaks the namenode's and datanodes'
protocols itself, and delta-rs reaches `hdfs://` through the same library. Both take the
namenode's settings from `HADOOP_CONF_DIR`, as Hadoop's client does (for a nameservice of
namenodes in HA). pyarrow could read a table's files under `hdfs://` only through a filesystem
of Python callbacks (hdfs-native's fsspec one in a `PyFileSystem`), which aborts the reading
process at exit (`arrow_filesystem` tells how often), so delta-rs reads those tables with its
own engine (`millrace.warehouse.delta`).
"""

from __future__ import annotations

import atexit
import errno
import fnmatch
import functools
import posixpath
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, TypeVarTuple
from urllib.parse import unquote, urlsplit

from millrace.config.settings import Settings
from millrace.errors import StorageError

if TYPE_CHECKING:
    from hdfs_native import Client, FileStatus
    from pyarrow import fs as pafs


_Arguments = TypeVarTuple("_Arguments")
_Result = TypeVar("_Result")


class FileStat(NamedTuple):
    """What `RemotePath.stat` tells, named as `os.stat_result` names it."""

    st_mtime: float
    st_size: int


class _Entry(NamedTuple):
    """A file or folder a store found: its path in the store, and what it is."""

    path: str
    is_dir: bool
    stat: FileStat


@dataclass(frozen=True)
class RemotePath:
    """A file or folder under a storage root that is not on this machine's disk.

    `str()` gives the Hadoop URI Spark takes; the methods are the few of `pathlib.Path`, with
    the same signatures, that millrace's readers of checkpoints and tables use, done by the
    store of the root (S3 or HDFS). An unreachable store raises `StorageError`; a missing
    file raises `FileNotFoundError`, as with a `Path`.

    Example:
        >>> root = storage_root(Path("/ws"), Settings(storage_root="hdfs://namenode:8020/prod"))
        >>> str(root / "checkpoints" / "top_events")
        'hdfs://namenode:8020/prod/checkpoints/top_events'
    """

    settings: Settings = field(repr=False)
    path: str
    """The path in the root's store: `bucket/key` under `s3a://`, `/folder/file` under `hdfs://`."""

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(self.settings, posixpath.join(self.path, name))

    def __str__(self) -> str:
        root = urlsplit(self.settings.storage_root)
        if root.scheme == "s3a":
            return f"s3a://{self.path}"  # the bucket is the first part of the path
        return f"{root.scheme}://{root.netloc}{self.path}"

    @property
    def name(self) -> str:
        """The last part of the path."""
        return posixpath.basename(self.path)

    @property
    def parent(self) -> RemotePath:
        """The folder that holds this one."""
        return RemotePath(self.settings, posixpath.dirname(self.path))

    def with_name(self, name: str) -> RemotePath:
        """The path beside this one named `name`."""
        return self.parent / name

    def exists(self) -> bool:
        """Whether a file or folder is there."""
        return self._entry() is not None

    def is_dir(self) -> bool:
        """Whether a folder is there (on S3: whether any object's key starts with this one's)."""
        found = self._entry()
        return found is not None and found.is_dir

    def is_file(self) -> bool:
        """Whether a file is there."""
        found = self._entry()
        return found is not None and not found.is_dir

    def stat(self) -> FileStat:
        """The file's modification time and size."""
        found = self._entry()
        if found is None:
            raise _not_found(self)
        return found.stat

    def iterdir(self) -> Iterator[RemotePath]:
        """What the folder holds; nothing when there is no folder."""
        for entry in self._call(self._store.entries, self.path, False):
            yield self / posixpath.basename(entry.path.rstrip("/"))

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
        for entry in self._call(self._store.entries, self.path, True):
            if not entry.is_dir and fnmatch.fnmatchcase(posixpath.basename(entry.path), pattern):
                yield RemotePath(self.settings, entry.path)

    def read_bytes(self) -> bytes:
        """The file's bytes."""
        return self._call(self._store.read, self.path)

    def read_text(self, encoding: str = "utf-8") -> str:
        """The file's text."""
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        """Write `data` to the file, making its folders (an object store has none to make)."""
        self._call(self._store.write, self.path, data)
        return len(data)

    def write_text(self, data: str, encoding: str = "utf-8") -> int:
        """Write `data` to the file."""
        self.write_bytes(data.encode(encoding))
        return len(data)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Make the folder; nothing on S3, which has no folders, only keys that share a prefix."""
        if not exist_ok and self.exists():
            raise FileExistsError(errno.EEXIST, "File exists", str(self))
        self._call(self._store.make_dir, self.path, parents)

    def replace(self, target: RemotePath) -> RemotePath:
        """Move this file to `target`, over any file there (on S3 a copy, then a delete)."""
        self._call(self._store.rename, self.path, target.path)
        return target

    def unlink(self, missing_ok: bool = False) -> None:
        """Delete the file."""
        if missing_ok and not self.exists():
            return
        self._call(self._store.delete_file, self.path)

    def delete_tree(self) -> None:
        """Delete this folder with every file below it; nothing when there is none."""
        if self.is_dir():
            self._call(self._store.delete_tree, self.path)

    @property
    def _store(self) -> _S3Store | _HdfsStore:
        return _store_of(self.settings)

    def _entry(self) -> _Entry | None:
        return self._call(self._store.entry, self.path)

    def _call(self, method: Callable[[*_Arguments], _Result], *arguments: *_Arguments) -> _Result:
        try:
            return method(*arguments)
        except FileNotFoundError:
            raise _not_found(self) from None
        except OSError as error:
            # Both clients raise OSError for a refused login and an unreachable endpoint alike.
            raise StorageError(
                f"cannot reach {self}: {_first_line(error)}", hint=self._store.hint
            ) from None
        except RuntimeError as error:
            # hdfs-native's error for what the namenode refused (no permission, safe mode).
            raise StorageError(
                f"the namenode refused {self}: {_first_line(error)}",
                hint="check that the user millrace runs as (or HADOOP_USER_NAME) may write there",
            ) from None


def _not_found(path: RemotePath) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))


def _first_line(error: Exception) -> str:
    """The error's message without the namenode's Java stack trace that HDFS's errors carry."""
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


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
    if parts.scheme in ("s3a", "hdfs"):
        return _remote_path(settings, parts.netloc, parts.path)
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
    """The path of a URI Spark resolved a location to: `file:/...` on the disk, or remote.

    Example:
        >>> storage_path("file:/ws/checkpoints/app/q", Settings())
        PosixPath('/ws/checkpoints/app/q')
    """
    parts = urlsplit(uri)
    if parts.scheme in ("s3a", "hdfs"):
        return _remote_path(settings, parts.netloc, unquote(parts.path))
    return Path(unquote(parts.path))


def _remote_path(settings: Settings, authority: str, path: str) -> RemotePath:
    """The `RemotePath` of a URI's parts: pyarrow names an S3 object `bucket/key`."""
    if urlsplit(settings.storage_root).scheme == "s3a":
        return RemotePath(settings, f"{authority}{path}")
    return RemotePath(settings, path or "/")


def move(source: StoragePath, target: StoragePath) -> None:
    """Move the file or folder `source` to `target`, making `target`'s folder first.

    Both are on the disk, or both under the same remote root, where a folder moves file by
    file on S3 (which has no folders to rename) and in one rename on HDFS.

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
        source._call(source._store.move, source.path, target.path)
    else:
        raise StorageError(
            f"cannot move {source} to {target}: one is on this machine's disk, one is not",
            hint="keep backups on the storage root of the checkpoints",
        )


def write_whole(path: StoragePath, text: str) -> None:
    """Write `text` to the file `path` so that a reader finds the old text or the new, whole.

    On the disk and on HDFS it is written beside and renamed over the file; an object store
    stores an object whole or not at all.

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
        path._call(path._store.write_whole, path.path, text.encode("utf-8"))


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
    """delta-rs's options for a table under an `s3a://` root; empty for a local or HDFS one.

    delta-rs reaches `hdfs://` with hdfs-native, which needs no option beyond the URI (and
    reads `HADOOP_CONF_DIR` for a nameservice).

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


def arrow_filesystem(folder: StoragePath) -> pafs.FileSystem | None:
    """The filesystem of pyarrow itself rooted at `folder`, for pyarrow to read the files below.

    None under `hdfs://`, for which pyarrow has none that runs without a JVM: delta-rs
    then reads the table's files itself.

    delta-rs hands pyarrow a filesystem of Python callbacks unless given one; pyarrow's
    I/O threads, still prefetching when the reading process exits, then call into a
    finalizing interpreter and abort it ("terminate called without an active exception"):
    `millrace query` of a table under moto's S3 did so in 9 runs of 40, and in none of 40
    with this filesystem (2026-11-26). Under HDFS, reading a table of 5 commits through
    delta-rs's filesystem of callbacks aborted 19 runs of 30, and through hdfs-native's
    fsspec filesystem in a `PyFileSystem` 6 of 30; `millrace query` of it, and of a table
    Spark wrote, through delta-rs's own engine aborted in none of 30 each (2026-11-27).

    Example:
        >>> arrow_filesystem(Path("/ws/tables/top_events/per_5min")).base_path
        '/ws/tables/top_events/per_5min/'
    """
    from pyarrow import fs as pafs

    if isinstance(folder, Path):
        return pafs.SubTreeFileSystem(str(folder), pafs.LocalFileSystem())
    store = _store_of(folder.settings)
    if isinstance(store, _HdfsStore):
        return None
    return pafs.SubTreeFileSystem(folder.path, store.filesystem)


@functools.cache
def _store_of(settings: Settings) -> _S3Store | _HdfsStore:
    """The store of the settings' root, made once per settings: each makes a client."""
    if urlsplit(settings.storage_root).scheme == "hdfs":
        return _HdfsStore(settings)
    return _S3Store(settings)


class _S3Store:
    """An `s3a://` root's objects, through pyarrow's S3 filesystem."""

    hint = "check storage.root and the storage.s3_* settings (or the AWS_* variables)"

    def __init__(self, settings: Settings) -> None:
        from pyarrow import fs as pafs

        options: dict[str, Any] = {  # Any: S3FileSystem's options, each of its own type
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
        self.filesystem = pafs.S3FileSystem(**options)

    def entry(self, path: str) -> _Entry | None:
        info = self.filesystem.get_file_info(path)
        return None if info.type.name == "NotFound" else _arrow_entry(info)

    def entries(self, path: str, recursive: bool) -> list[_Entry]:
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
        return [_arrow_entry(info) for info in self.filesystem.get_file_info(selector)]

    def read(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(path) as stream:
            return bytes(stream.read())

    def write(self, path: str, data: bytes) -> None:
        with self.filesystem.open_output_stream(path) as stream:
            stream.write(data)

    def write_whole(self, path: str, data: bytes) -> None:
        self.write(path, data)  # an object store stores an object whole or not at all

    def make_dir(self, path: str, parents: bool) -> None:
        """Nothing: an object store has no folders, only keys that share a prefix."""

    def rename(self, source: str, target: str) -> None:
        self.filesystem.move(source, target)

    def move(self, source: str, target: str) -> None:
        found = self.entry(source)
        if found is None:
            return
        if not found.is_dir:
            self.filesystem.move(source, target)
            return
        for entry in self.entries(source, recursive=True):
            if not entry.is_dir:
                self.filesystem.move(entry.path, target + entry.path.removeprefix(source))
        self.delete_tree(source)  # pyarrow leaves an empty marker object for each emptied folder

    def delete_file(self, path: str) -> None:
        self.filesystem.delete_file(path)

    def delete_tree(self, path: str) -> None:
        self.filesystem.delete_dir(path)


def _arrow_entry(info: pafs.FileInfo) -> _Entry:
    modified = info.mtime.timestamp() if info.mtime is not None else 0.0
    stat = FileStat(modified, info.size or 0)
    return _Entry(info.path, info.type.name == "Directory", stat)


def _finalize_s3() -> None:
    """Drop the cached stores, then shut pyarrow's S3 support down, at exit.

    pyarrow's own exit handler finalizes S3 with this cache still holding a filesystem,
    which can abort a process after its work (apache/arrow#41087). Registered after
    pyarrow's handler, this one runs before it.
    """
    from pyarrow import fs as pafs

    _store_of.cache_clear()
    pafs.finalize_s3()


_HDFS_CLIENT = {
    # A namenode that does not answer is an error within seconds: with Hadoop's defaults
    # (15 tries, waits of up to 15 s) hdfs-native gave up on a closed port after 3 minutes.
    "dfs.client.failover.max.attempts": "2",
    "dfs.client.failover.sleep.base.millis": "200",
    "dfs.client.failover.sleep.max.millis": "1000",
}


class _HdfsStore:
    """An `hdfs://` root's files and folders, through hdfs-native's client.

    HDFS has folders and renames atomically, so folders are made, a folder moves in one
    rename, and a file is written whole by a rename over it.
    """

    hint = "check storage.root (the namenode's host and RPC port) and that the namenode runs"

    def __init__(self, settings: Settings) -> None:
        from hdfs_native import Client

        namenode = f"hdfs://{urlsplit(settings.storage_root).netloc}"
        self.client: Client = Client(namenode, _HDFS_CLIENT)

    def entry(self, path: str) -> _Entry | None:
        try:
            return _hdfs_entry(self.client.get_file_info(path))
        except FileNotFoundError:
            return None

    def entries(self, path: str, recursive: bool) -> list[_Entry]:
        # Only a folder is listed: HDFS lists a file as itself, and refuses a path below one.
        found = self.entry(path)
        if found is None or not found.is_dir:
            return []
        try:
            return [_hdfs_entry(status) for status in self.client.list_status(path, recursive)]
        except FileNotFoundError:
            return []  # deleted since

    def read(self, path: str) -> bytes:
        # Bound before `with`, whose hdfs-native `__enter__` has no annotation to type it.
        reader = self.client.read(path)
        with reader:
            return reader.read()

    def write(self, path: str, data: bytes) -> None:
        from hdfs_native import WriteOptions

        options = WriteOptions(overwrite=True, create_parent=True)
        with self.client.create(path, options) as writer:
            writer.write(data)

    def write_whole(self, path: str, data: bytes) -> None:
        staged = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.tmp")
        self.write(staged, data)
        self.client.rename(staged, path, overwrite=True)

    def make_dir(self, path: str, parents: bool) -> None:
        self.client.mkdirs(path, create_parent=parents)

    def rename(self, source: str, target: str) -> None:
        self.client.mkdirs(posixpath.dirname(target), create_parent=True)
        self.client.rename(source, target, overwrite=True)

    def move(self, source: str, target: str) -> None:
        self.rename(source, target)

    def delete_file(self, path: str) -> None:
        self.client.delete(path)

    def delete_tree(self, path: str) -> None:
        self.client.delete(path, recursive=True)


def _hdfs_entry(status: FileStatus) -> _Entry:
    stat = FileStat(status.modification_time / 1000, status.length)
    return _Entry(status.path, status.isdir, stat)
