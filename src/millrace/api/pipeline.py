"""The pipeline as a graph: `GET /pipeline`, who reads and writes which stream and table.

Nodes are the apps the monitor knows, the streams they read and write, their dead-letter
streams, SQL apps' result tables and the serving tables deployed apps look up or fill.
An app reads the streams its checkpoints and batches name, and writes the streams its
watermark markers are found on (`millrace.monitor.pipeline`); what a deployed app's code
declares, as the registry keeps it (`millrace.apps.declarations`), adds the streams it
inserts into and its serving tables. An edge into an app carries the
records per second the app read from that stream over the last minute and its processing lag
there.
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from millrace.api.deps import get_monitor, get_workspace
from millrace.api.errors import ERROR_RESPONSES
from millrace.bus.streams import dead_letter_stream, list_streams
from millrace.config.workspace import Workspace
from millrace.monitor.metrics_log import Batch
from millrace.monitor.service import Monitor
from millrace.monitor.status import AppStatus
from millrace.ops import registry
from millrace.warehouse.result_tables import result_tables

router = APIRouter(responses=ERROR_RESPONSES)

NodeKind = Literal["app", "stream", "result_table", "serving_table"]
RATE_WINDOW_MS = 60_000


class Node(BaseModel):
    """One app, stream, result table or serving table.

    `id` is `<kind>:<name>` (a result table's name is `<app>.<table>`); `state` an app's
    deployment (`running`, `stopped`, `finished`, `crashed`, or `not deployed` for one run
    in the foreground) and `activity` what its batches say (`processing`, `stalled`, `idle`).
    """

    id: str
    kind: NodeKind
    name: str
    state: str | None = None
    activity: str | None = None


class Edge(BaseModel):
    """A node reading from (or writing to) another: `source` feeds `target`."""

    source: str
    target: str
    rows_per_second: float | None = None
    lag_records: int | None = None
    lag_seconds: float | None = None


class Pipeline(BaseModel):
    """The graph of the workspace's apps and what they read and write."""

    nodes: list[Node]
    edges: list[Edge]


@router.get("/pipeline", summary="The apps and the streams and tables they read and write")
def pipeline(
    workspace: Workspace = Depends(get_workspace),  # noqa: B008
    monitor: Monitor = Depends(get_monitor),  # noqa: B008
) -> Pipeline:
    """Nodes for apps, streams and tables; edges for who reads and writes what."""
    return build_pipeline(workspace, monitor)


def build_pipeline(workspace: Workspace, monitor: Monitor) -> Pipeline:
    """The graph of `workspace`'s apps, as `GET /pipeline` returns it."""
    statuses = monitor.statuses()
    deployed = {record.name: record for record in registry.list_apps(workspace)}
    writers = monitor.writers.refresh()
    existing = set(list_streams(workspace.settings))
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    now_ms = int(time.time() * 1000)

    def add(kind: NodeKind, name: str) -> str:
        node_id = f"{kind}:{name}"
        nodes.setdefault(node_id, Node(id=node_id, kind=kind, name=name))
        return node_id

    for status in statuses:
        record = deployed.get(status.name)
        app_id = f"app:{status.name}"
        nodes[app_id] = Node(
            id=app_id,
            kind="app",
            name=status.name,
            state=record.status if record is not None else "not deployed",
            activity=status.activity,
        )
        rates = _input_rates(monitor.metrics.batches(status.name, since_ms=now_ms - RATE_WINDOW_MS))
        for stream in _inputs(status):
            lag = next((lag for lag in status.inputs if lag.stream == stream), None)
            edges.append(
                Edge(
                    source=add("stream", stream),
                    target=app_id,
                    rows_per_second=rates.get(stream, 0.0),
                    lag_records=lag.lag_records if lag is not None else None,
                    lag_seconds=lag.lag_seconds if lag is not None else None,
                )
            )
            if dead_letter_stream(stream) in existing:
                edges.append(Edge(source=app_id, target=add("stream", dead_letter_stream(stream))))
        for table in result_tables(workspace, status.name):
            edges.append(Edge(source=app_id, target=add("result_table", f"{status.name}.{table}")))
        written = {stream for stream, by_writer in writers.items() if status.name in by_writer}
        if record is not None:
            declared = record.declared
            edges += [
                Edge(source=add("serving_table", t), target=app_id) for t in declared.looked_up
            ]
            edges += [Edge(source=app_id, target=add("serving_table", t)) for t in declared.served]
            written |= set(declared.streams)
        edges += [Edge(source=app_id, target=add("stream", s)) for s in sorted(written)]
    return Pipeline(nodes=sorted(nodes.values(), key=lambda node: node.id), edges=edges)


def _inputs(status: AppStatus) -> list[str]:
    return sorted({lag.stream for lag in status.inputs} | {w.stream for w in status.watermarks})


def _input_rates(batches: list[Batch]) -> dict[str, float]:
    """Records per second read from each stream in `batches` (the last minute's)."""
    read: dict[str, int] = {}
    for batch in batches:
        for source in batch.fields.get("sources") or []:
            starts = source.get("start_offsets") or {}
            for stream, ends in (source.get("end_offsets") or {}).items():
                for bucket, end in (ends or {}).items():
                    start = (starts.get(stream) or {}).get(bucket, end)
                    read[stream] = read.get(stream, 0) + max(0, int(end) - int(start))
    return {stream: count / (RATE_WINDOW_MS / 1000) for stream, count in read.items()}
