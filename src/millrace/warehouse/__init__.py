"""The warehouse: every archived stream as a Delta table of its records as the bus kept them."""
