"""The web dashboard of `millrace serve`: pages under `/ui/`, their charts and their assets."""
