"""Aggregates of SQL apps: millrace's own, and how each one splits over panes.

millrace adds `TOPK(item, weight, k)` to Spark SQL: the `k` items of largest total weight,
as an array of `{item, weight}` structs, heaviest first (ties by item). `APPROX_COUNT_DISTINCT`
is computed with a HyperLogLog sketch (Apache DataSketches, about 1.6% standard error), which,
unlike Spark's own, can be merged. Every other aggregate is Spark's.

A decomposable aggregate splits into partial aggregates over the rows of a pane (a slice of
time one slide long) and a combination of those partials over the panes of a window. The
two-stage plan of `millrace.sql.compiler` is built from these splits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType
from sqlglot import exp

from millrace.errors import SqlError

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql._typing import UserDefinedFunctionLike

TOPK_FINISH = "millrace_topk"
"""The SQL function that sums `{item, weight}` entries per item and keeps the heaviest `k`."""

TOPK_TYPE = ArrayType(
    StructType([StructField("item", StringType()), StructField("weight", DoubleType())])
)


@dataclass(frozen=True)
class Split:
    """An aggregate as partials over a pane's rows, and their combination over panes.

    `combine` receives the columns holding the partials, in the order of `partials`.
    """

    partials: tuple[exp.Expr, ...]
    combine: Callable[[list[exp.Expr]], exp.Expr]


def is_aggregate(node: exp.Expr) -> bool:
    """True for an aggregate call, Spark's or millrace's."""
    return isinstance(node, exp.AggFunc) or is_topk(node)


def distinct_aggregates(tree: exp.Expr) -> list[exp.Expr]:
    """The aggregate calls in `tree` over DISTINCT values, such as `COUNT(DISTINCT user)`.

    Spark runs none of them on a stream: it would have to keep every value seen in its state.

    Example:
        >>> query = sqlglot.parse_one("SELECT COUNT(DISTINCT u) AS n FROM t", read="spark")
        >>> [node.sql(dialect="spark") for node in distinct_aggregates(query)]
        ['COUNT(DISTINCT u)']
    """
    return [
        node.parent for node in tree.find_all(exp.Distinct) if isinstance(node.parent, exp.AggFunc)
    ]


def is_topk(node: exp.Expr) -> bool:
    """True for a `TOPK(...)` call."""
    return isinstance(node, exp.Anonymous) and node.name.upper() == "TOPK"


def topk_arguments(node: exp.Expr, where: str) -> tuple[exp.Expr, exp.Expr, int]:
    """The item, the weight and `k` of a `TOPK` call; `where` prefixes the error message."""
    arguments = node.expressions
    k = arguments[2] if len(arguments) == 3 else None
    if k is None or not (isinstance(k, exp.Literal) and k.is_int and int(k.name) > 0):
        raise SqlError(
            f"{where}: TOPK takes (item, weight, k) with k a positive whole number, "
            f"got {node.sql(dialect='spark')}",
            hint="write it like TOPK(event, score, 10); use 1 as the weight to count items",
        )
    return arguments[0], arguments[1], int(k.name)


def single_stage(node: exp.Expr, where: str) -> exp.Expr | None:
    """What millrace runs for aggregate `node` in a one-stage plan, or None to keep it as is."""
    if is_topk(node):
        item, weight, k = topk_arguments(node, where)
        entries = exp.func(
            "collect_list",
            exp.func("named_struct", *_topk_entry(item, weight)),
            dialect="spark",
        )
        return exp.func(TOPK_FINISH, entries, exp.Literal.number(k), dialect="spark")
    if isinstance(node, exp.ApproxDistinct):
        return _hll_estimate(exp.func("hll_sketch_agg", _hll_input(node.this), dialect="spark"))
    return None


def split(
    node: exp.Expr, where: str, topk_item: str | None, *, one_pane_per_window: bool
) -> Split | None:
    """How aggregate `node` splits over panes, or None when it does not.

    In a two-stage plan the panes are also grouped by the TOPK item, `topk_item`, a column of
    the pane rows; so a TOPK's partial is its weight summed per item. When each window is one
    pane (a tumbling window), each item comes once per window and is ranked inside Spark;
    otherwise `TOPK_FINISH` adds up each item's weights over the panes.
    """
    if is_topk(node):
        _, weight, k = topk_arguments(node, where)
        if topk_item is None:
            return None
        item = exp.column(topk_item)
        partials = (exp.func("sum", _as_double(weight), dialect="spark"),)
        if one_pane_per_window:
            return Split(partials, lambda parts: _ranked_unique_items(item, parts[0], k))
        return Split(
            partials,
            lambda parts: exp.func(
                TOPK_FINISH,
                exp.func(
                    "collect_list",
                    exp.func("named_struct", *_topk_entry(item, parts[0])),
                    dialect="spark",
                ),
                exp.Literal.number(k),
                dialect="spark",
            ),
        )
    if isinstance(node, exp.Count) and not isinstance(node.this, exp.Distinct):
        return Split((node.copy(),), lambda parts: exp.func("sum", parts[0], dialect="spark"))
    if isinstance(node, exp.Sum | exp.Min | exp.Max) and len(node.expressions) == 0:
        return Split((node.copy(),), lambda parts: node.__class__(this=parts[0]))
    if isinstance(node, exp.Avg):
        return Split(
            (
                exp.func("sum", _as_double(node.this), dialect="spark"),
                exp.Count(this=node.this.copy()),
            ),
            lambda parts: exp.Div(
                this=exp.func("sum", parts[0], dialect="spark"),
                expression=exp.func("sum", parts[1], dialect="spark"),
            ),
        )
    if isinstance(node, exp.ApproxDistinct) and node.args.get("accuracy") is None:
        return Split(
            (exp.func("hll_sketch_agg", _hll_input(node.this), dialect="spark"),),
            lambda parts: _hll_estimate(exp.func("hll_union_agg", parts[0], dialect="spark")),
        )
    return None


def topk_item(node: exp.Expr, where: str) -> exp.Expr:
    """The item of a TOPK call, as the string the pane rows are grouped by."""
    item, _, _ = topk_arguments(node, where)
    return exp.cast(item.copy(), "string")


def topk_finish() -> UserDefinedFunctionLike:
    """The Spark function behind `TOPK_FINISH`, to register in the session."""
    return F.udf(_topk, TOPK_TYPE, useArrow=True)


def _topk(entries: list[Row] | None, k: int) -> list[tuple[str, float]]:
    totals: dict[str, float] = {}
    for entry in entries or ():
        item, weight = entry["item"], entry["weight"]
        if item is not None and weight is not None:
            totals[item] = totals.get(item, 0.0) + weight
    return sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))[:k]


def _ranked_unique_items(item: exp.Expr, weight: exp.Expr, k: int) -> exp.Expr:
    # Sorting (-weight, item) ascending ranks heaviest first, ties by item, as `_topk` does.
    template = sqlglot.parse_one(
        "transform(slice(sort_array(collect_list(IF(_topk_item IS NULL OR _topk_weight IS NULL, "
        "NULL, named_struct('negative_weight', -_topk_weight, 'item', _topk_item)))), 1, "
        f"{k}), entry -> named_struct('item', entry.item, 'weight', -entry.negative_weight))",
        read="spark",
    )
    placeholders = {"_topk_item": item, "_topk_weight": weight}
    return template.transform(
        lambda node: (
            placeholders[node.name].copy()
            if isinstance(node, exp.Column) and node.name in placeholders
            else node
        )
    )


def _topk_entry(item: exp.Expr, weight: exp.Expr) -> list[exp.Expr]:
    return [
        exp.Literal.string("item"),
        exp.cast(item.copy(), "string"),
        exp.Literal.string("weight"),
        _as_double(weight),
    ]


def _as_double(value: exp.Expr) -> exp.Expr:
    return exp.cast(value.copy(), "double")


def _hll_input(value: exp.Expr) -> exp.Expr:
    # The sketch takes strings, integers and bytes; one type keeps every plan's hashes equal.
    return exp.cast(value.copy(), "string")


def _hll_estimate(sketch: exp.Expr) -> exp.Expr:
    return exp.func("hll_sketch_estimate", sketch, dialect="spark")
