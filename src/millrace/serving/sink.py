"""Serving tables from Spark: upserts from the executors, and lookup joins with a cache.

`write_table` writes a DataFrame's rows into a serving table from the executors: each task
takes its partition's rows as Arrow batches and sends each batch to Redis as one pipeline of
SETs (upserts by key, with the table's TTL). It is usable as, or inside, a `foreachBatch`
function; a micro-batch written again leaves the table as it was.

`lookup_column` is the paper's Joiner: a column holding, for each row, the serving table's row
for a key computed from the row, as a struct of the table's value columns (NULL fields for a
missing key). Keys travel in Arrow batches (10,000 rows by default): each batch's keys, less
those in the executor's cache, go to Redis in one MGET, and found rows (and misses) stay in
the cache for `max_age_s`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.pandas.functions import pandas_udf

from millrace.errors import TableSpecError
from millrace.serving.tables import TableSpec, lookup_rows, write_rows

if TYPE_CHECKING:
    from pyspark.sql._typing import UserDefinedFunctionLike


def write_table(rows: DataFrame, spec: TableSpec, url: str) -> int:
    """Upsert the rows of `rows` (a batch DataFrame with the table's columns) into `spec`'s table.

    Runs on the executors, a pipeline per Arrow batch of each partition, in the partition's
    order, so the later of two rows of one key in a partition wins. Rows with a null key are
    left out. Returns the rows written. Raises `TableSpecError` when a column is missing.
    """
    missing = [name for name in spec.columns if name not in rows.columns]
    if missing:
        raise TableSpecError(
            f"rows for serving table {spec.name!r} lack column(s) {', '.join(missing)}",
            hint=f"the table's columns are {', '.join(spec.columns)}; its writer's columns "
            f"are {', '.join(rows.columns)}",
        )

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        written = 0
        for batch in batches:
            columns = {name: batch.column(name).to_pylist() for name in spec.columns}
            written += write_rows(url, spec, columns)
        yield pa.RecordBatch.from_pydict({"written": [written]})

    selected = rows.select(*(F.col(f"`{name}`") for name in spec.columns))
    total = selected.mapInArrow(write, "written BIGINT").agg(F.sum("written")).first()
    return int(total[0] or 0) if total is not None else 0


def lookup_column(
    key: Column | list[Column], spec: TableSpec, url: str, *, max_age_s: float
) -> Column:
    """A struct column of `spec`'s value columns for the row whose key is `key`; NULLs if none.

    `key` is one column per key column of the table. The lookups go one MGET per Arrow batch,
    through the executor's cache of rows younger than `max_age_s` seconds.
    """
    keys = key if isinstance(key, list) else [key]
    if len(keys) != len(spec.keys):
        raise TableSpecError(
            f"serving table {spec.name!r} has key column(s) {', '.join(spec.key_names)}, and "
            f"the lookup gives {len(keys)} key value(s)",
            hint="give one value per key column",
        )
    values = spec.values or (("_found", "BOOLEAN"),)
    schema = ", ".join(f"`{name}`: {kind}" for name, kind in values)
    names = [name for name, _ in values]

    # PySpark's stubs lack the type-hinted form, pandas_udf(returnType) without functionType.
    struct_udf: Callable[[Callable[..., pd.DataFrame]], UserDefinedFunctionLike]
    struct_udf = pandas_udf(f"struct<{schema}>")  # type: ignore[call-overload]

    @struct_udf
    def look_up(*parts: pd.Series) -> pd.DataFrame:
        if len(parts) == 1:
            wanted = [None if pd.isna(part) else part for part in parts[0].tolist()]
        else:
            wanted = [
                None if any(pd.isna(piece) for piece in row) else tuple(row)
                for row in zip(*(part.tolist() for part in parts), strict=True)
            ]
        rows = lookup_rows(url, spec, wanted, max_age_s=max_age_s)
        if not spec.values:
            return pd.DataFrame({"_found": [row is not None for row in rows]})
        return pd.DataFrame(
            {
                name: pd.Series(
                    [None if row is None else row.get(name) for row in rows], dtype=object
                )
                for name in names
            }
        )

    return look_up(*keys)
