"""The URIs and URLs that settings hold: the storage root's, checked, and URLs made fit to show.

`check_root_uri` says whether `storage.root` names a root millrace can keep its files under;
`without_password` is what messages and status lines show of a URL that may hold a login.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from millrace.errors import ConfigError

SCHEMES = ("s3a", "hdfs", "file")
"""The URI schemes `storage.root` may have."""

_ROOT_HINT = (
    "set storage.root (MILLRACE_STORAGE_ROOT) to s3a://bucket/prefix, "
    "hdfs://namenode:port/prefix or file:///shared/folder, "
    "or leave it empty to keep the files in the workspace"
)


def check_root_uri(uri: str) -> str:
    """`uri` without a trailing slash, when it is a root `storage.root` may name.

    Raises `ConfigError` saying what is wrong: an unknown scheme (`s3://` is Hadoop's old
    connector: `s3a://` is the one to name), no bucket or namenode, or a query or fragment.

    Example:
        >>> check_root_uri("s3a://millrace-data/prod/")
        's3a://millrace-data/prod'
    """
    if not uri:
        return uri
    parts = urlsplit(uri)
    if parts.scheme not in SCHEMES:
        guess = " (Hadoop's S3 connector is s3a://)" if parts.scheme in ("s3", "s3n") else ""
        *others, last = [f"{scheme}://" for scheme in SCHEMES]
        raise ConfigError(
            f"storage.root {uri!r} is not an {', '.join(others)} or {last} URI{guess}",
            hint=_ROOT_HINT,
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"storage.root {uri!r} has a query or fragment", hint=_ROOT_HINT)
    if parts.scheme == "s3a" and not parts.netloc:
        raise ConfigError(f"storage.root {uri!r} names no bucket", hint=_ROOT_HINT)
    if parts.scheme == "hdfs" and not parts.netloc:
        raise ConfigError(f"storage.root {uri!r} names no namenode", hint=_ROOT_HINT)
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ConfigError(
            f"storage.root {uri!r} is not an absolute file URI (file:///folder)", hint=_ROOT_HINT
        )
    return uri.rstrip("/")


def without_password(url: str) -> str:
    """`url` with the password, and a user with it, left out, for messages and status lines.

    Example:
        >>> without_password("redis://app:s3cret@127.0.0.1:6379/0")
        'redis://127.0.0.1:6379/0'
    """
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
