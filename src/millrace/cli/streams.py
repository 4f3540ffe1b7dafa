"""CLI verbs for streams: `millrace stream create | list | describe | delete`."""

from __future__ import annotations

import click

from millrace.bus import streams as bus_streams
from millrace.config.settings import Settings
from millrace.config.workspace import Workspace
from millrace.warehouse.layout import mark_for_archive


@click.group()
def stream() -> None:
    """Create, list, describe and delete streams (Kafka topics; buckets are partitions)."""


@stream.command()
@click.argument("name")
@click.option("--buckets", default=1, show_default=True, help="Partitions of the stream.")
@click.option(
    "--retention",
    default="7d",
    show_default=True,
    help="How long records are kept: 12h, 3d, 2w... or 'forever'.",
)
@click.option(
    "--archive", is_flag=True, help="Mark it for archiving to the warehouse (millrace archive)."
)
def create(name: str, buckets: int, retention: str, archive: bool) -> None:
    """Create stream NAME."""
    workspace = Workspace.locate().require_initialized()
    bus_streams.create_stream(workspace.settings, name, buckets=buckets, retention=retention)
    click.echo(f"created stream {name!r} with {buckets} buckets, retention {retention}")
    if archive:
        mark_for_archive(workspace, name)
        click.echo(
            f"marked for archiving: run `millrace archive {name}` (or `millrace archive --all`) "
            "to keep copying it to the warehouse"
        )


@stream.command(name="list")
def list_() -> None:
    """List the streams."""
    for name in bus_streams.list_streams(_settings()):
        click.echo(name)


@stream.command()
@click.argument("name")
def describe(name: str) -> None:
    """Show NAME's buckets with their offsets, its record count and its retention."""
    info = bus_streams.describe_stream(_settings(), name)
    click.echo(f"stream:    {info.name}")
    click.echo(f"buckets:   {len(info.buckets)}")
    click.echo(f"records:   {info.record_count}")
    click.echo(f"retention: {bus_streams.format_retention(info.retention_ms)}")
    click.echo(f"{'bucket':>8} {'start offset':>14} {'end offset':>14} {'records':>10}")
    for bucket in info.buckets:
        click.echo(
            f"{bucket.bucket:>8} {bucket.start_offset:>14} {bucket.end_offset:>14} "
            f"{bucket.record_count:>10}"
        )


@stream.command()
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name: str, yes: bool) -> None:
    """Delete stream NAME and all its records."""
    if not yes:
        click.confirm(f"delete stream {name!r} and all its records?", abort=True)
    bus_streams.delete_stream(_settings(), name)
    click.echo(f"deleted stream {name!r}")


def _settings() -> Settings:
    return Workspace.locate().require_initialized().settings
