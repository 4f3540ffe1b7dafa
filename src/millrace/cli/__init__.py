"""The `millrace` command line: thin verbs that parse, call one service function, and render.

`cli.demo` is `millrace demo`, the trending pipeline of `make demo`.
"""
