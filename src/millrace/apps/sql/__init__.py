"""SQL apps on Spark: their streaming queries, batch runs and result tables."""
