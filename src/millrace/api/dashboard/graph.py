"""The pipeline graph as SVG: nodes in columns by how far downstream they are, edges between.

A node stands one column right of the furthest node feeding it (a cycle stops at the number
of nodes), and a node nothing feeds just left of the first node it feeds. Within a
column nodes keep the order of their ids. Apps and streams link to their pages, result
tables to their app's results page. An edge into an app is labelled with the records per
second the app read from it in the last minute and its lag there.
"""

from __future__ import annotations

from urllib.parse import quote

from millrace.api.dashboard.html import escape, number
from millrace.api.pipeline import Edge, Node, Pipeline

NODE_W, NODE_H = 170, 44
COLUMN_GAP, ROW_GAP = 96, 22
_MARGIN = 16
_NAME_CHARS = 24
_KIND_LABEL = {
    "app": "app",
    "stream": "stream",
    "result_table": "result table",
    "serving_table": "serving table",
}


def pipeline_svg(pipeline: Pipeline) -> str:
    """The SVG of `pipeline`, or a sentence when it has no node yet.

    Example:
        >>> pipeline_svg(Pipeline(nodes=[], edges=[]))
        '<p class="muted">no apps yet: an app appears once it has run a batch</p>'
    """
    if not pipeline.nodes:
        return '<p class="muted">no apps yet: an app appears once it has run a batch</p>'
    places = _layout(pipeline)
    columns = max(column for column, _ in places.values()) + 1
    rows = max(row for _, row in places.values()) + 1
    width = 2 * _MARGIN + columns * NODE_W + (columns - 1) * COLUMN_GAP
    height = 2 * _MARGIN + rows * NODE_H + (rows - 1) * ROW_GAP
    parts = [
        f'<svg class="graph" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="pipeline graph">'
    ]
    drawn = [edge for edge in pipeline.edges if _drawn(edge, places)]
    parts += [_edge(edge, places) for edge in drawn]
    parts += [_node(node, *places[node.id]) for node in pipeline.nodes]
    # Labels last, so that no line or box hides one.
    parts += [_edge_label(edge, places) for edge in drawn]
    parts.append("</svg>")
    return "".join(parts)


def _drawn(edge: Edge, places: dict[str, tuple[int, int]]) -> bool:
    return edge.source in places and edge.target in places


def _layout(pipeline: Pipeline) -> dict[str, tuple[int, int]]:
    """Each node's (column, row)."""
    depth = {node.id: 0 for node in pipeline.nodes}
    for _ in range(len(pipeline.nodes)):
        moved = False
        for edge in pipeline.edges:
            if edge.source in depth and edge.target in depth:
                wanted = depth[edge.source] + 1
                if depth[edge.target] < wanted:
                    depth[edge.target] = wanted
                    moved = True
        if not moved:
            break
    # A node nothing feeds (a source stream, a serving table) stands just left of its readers.
    fed = {edge.target for edge in pipeline.edges}
    for node in pipeline.nodes:
        readers = [
            depth[e.target] for e in pipeline.edges if e.source == node.id and e.target in depth
        ]
        if node.id not in fed and readers:
            depth[node.id] = max(0, min(readers) - 1)
    places: dict[str, tuple[int, int]] = {}
    filled: dict[int, int] = {}
    for node in pipeline.nodes:
        column = depth[node.id]
        places[node.id] = (column, filled.get(column, 0))
        filled[column] = filled.get(column, 0) + 1
    return places


def _corner(place: tuple[int, int]) -> tuple[int, int]:
    column, row = place
    return _MARGIN + column * (NODE_W + COLUMN_GAP), _MARGIN + row * (NODE_H + ROW_GAP)


def _node(node: Node, column: int, row: int) -> str:
    left, top = _corner((column, row))
    name = node.name if len(node.name) <= _NAME_CHARS else "…" + node.name[-_NAME_CHARS + 1 :]
    kind = _KIND_LABEL[node.kind]
    if node.kind == "app":
        kind += f" · {node.state or ''}" + (f", {node.activity}" if node.activity else "")
    classes = " ".join(
        escape(part) for part in ("node", node.kind, node.state or "", node.activity or "") if part
    )
    inner = (
        f'<rect x="{left}" y="{top}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
        f'<text x="{left + 8}" y="{top + 18}">{escape(name)}</text>'
        f'<text class="kind" x="{left + 8}" y="{top + 34}">{escape(kind)}</text>'
        f"<title>{escape(node.name)}</title>"
    )
    link = _link(node)
    if link is not None:
        inner = f'<a href="{escape(link)}">{inner}</a>'
    return f'<g class="{classes}" data-node="{escape(node.id)}">{inner}</g>'


def _link(node: Node) -> str | None:
    if node.kind == "app":
        return f"/ui/apps/{quote(node.name, safe='')}"
    if node.kind == "stream":
        return f"/ui/streams/{quote(node.name, safe='')}"
    if node.kind == "result_table":
        app, _, table = node.name.partition(".")
        return f"/ui/apps/{quote(app, safe='')}/results#{quote(table, safe='')}"
    return None


def _ends(edge: Edge, places: dict[str, tuple[int, int]]) -> tuple[float, float, float, float]:
    left, top = _corner(places[edge.source])
    right, bottom = _corner(places[edge.target])
    return left + NODE_W, top + NODE_H / 2, right, bottom + NODE_H / 2


def _edge(edge: Edge, places: dict[str, tuple[int, int]]) -> str:
    x1, y1, x2, y2 = _ends(edge, places)
    bend = max(30.0, (x2 - x1) / 2)
    return (
        f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{x1 + bend:.0f},{y1:.0f} '
        f'{x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}" '
        f'data-source="{escape(edge.source)}" data-target="{escape(edge.target)}"/>'
    )


def _edge_label(edge: Edge, places: dict[str, tuple[int, int]]) -> str:
    """The rate and lag of an edge into an app, above the middle of its line."""
    label = []
    if edge.rows_per_second is not None:
        label.append(f"{number(edge.rows_per_second)}/s")
    if edge.lag_records is not None:
        label.append(f"lag {number(edge.lag_records)}")
    if not label:
        return ""
    x1, y1, x2, y2 = _ends(edge, places)
    return (
        f'<text class="edge-label" x="{(x1 + x2) / 2:.0f}" y="{(y1 + y2) / 2 - 4:.0f}" '
        f'text-anchor="middle">{escape(" · ".join(label))}</text>'
    )
