"""The warehouse: Delta tables, the archives of streams and the results of SQL apps.

`warehouse.delta` is the one module that opens a Delta table (delta-rs without Spark, Spark's
Delta client in jobs); `warehouse.archive` archives streams and reads them back,
`warehouse.layout` says what an archive holds, `warehouse.result_tables` reads SQL apps'
result tables without Spark, and `warehouse.adhoc_sql` runs `millrace sql`.
"""
