"""The HTTP service of `millrace serve`: a FastAPI app over the monitor and the bus."""
