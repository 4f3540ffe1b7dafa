"""The SQL layer: Puma-style apps, a small DDL around Spark SQL, compiled to Spark queries.

`parser` reads a `.sql` app file into statements with their positions; `checks` refuses what
cannot run before Spark starts; `compiler` turns them into DataFrames on the engine. The DDL
grammar is documented in docs/sql.md.
"""
