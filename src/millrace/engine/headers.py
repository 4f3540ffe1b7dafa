"""A Kafka record's headers read as Spark columns, by name, in compiled code.

Kafka's reader gives a record's headers as an array of `(key, value)` structs. Finding one
by its key with Spark's `filter` runs a lambda row by row outside the generated code, and a
projection holding such a lambda is left out of whole-stage code generation, which made every
record of an input cost more. `array_position` over the array of keys is compiled like the
rest of the query; it finds the first header with the key, as `filter` did.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention

from millrace.records import ID_HEADER


def header_text(headers: Column, name: str) -> Column:
    """The value of the first header called `name`, as a STRING; NULL when there is none.

    `headers` is the record's headers column, as Kafka's reader or an archive gives it.
    """
    position = F.array_position(headers.getField("key"), F.lit(name))
    return F.when(position > 0, F.element_at(headers, position.cast("int")).getField("value")).cast(
        "string"
    )


def has_header(headers: Column, name: str) -> Column:
    """Whether a record has a header called `name`: never NULL, false without headers."""
    return F.coalesce(F.array_contains(headers.getField("key"), F.lit(name)), F.lit(False))


def record_id_column() -> Column:
    """A Kafka record's id: its `id` header's value, NULL when empty or missing.

    Reads the record's `headers` column, as Kafka's reader or an archive gives it.
    """
    # Another producer's empty header is no id: the record gets its place, as without one.
    return F.nullif(header_text(F.col("headers"), ID_HEADER), F.lit(""))
