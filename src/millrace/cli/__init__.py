"""The `millrace` command line: thin verbs that parse, call one service function, and render."""
