"""The warehouse: archived streams as Delta tables, and Delta tables read without Spark."""
