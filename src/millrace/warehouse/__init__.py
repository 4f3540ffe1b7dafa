"""The warehouse: Delta tables, the archives of streams and the results of SQL apps.

`warehouse.delta` is the one module that opens a Delta table (delta-rs without Spark, Spark's
Delta client in jobs); `warehouse.archive` archives streams and reads them back,
`warehouse.layout` says what an archive holds, `warehouse.result_tables` reads SQL apps'
result tables without Spark, and ad-hoc queries (`millrace sql`, `POST /sql`) follow the
rules of `warehouse.adhoc_query`, answered by DuckDB in this process (`warehouse.local_sql`)
or by Spark (`warehouse.adhoc_sql`); `warehouse.sql_text` says sqlglot's parse errors in SQL's
words, for them and for SQL apps.
"""
