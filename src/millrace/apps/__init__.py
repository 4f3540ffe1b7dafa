"""The apps layer: what an app is and how it runs on the engine.

`apps.app` is the one type every verb loads an app as (a SQL app or a processor), with its
kind, name, state fingerprint, streaming start, batch run and backfill; `apps.runner` is an
app's driver; `apps.sql` and `apps.processors` run the two kinds on Spark.
"""
