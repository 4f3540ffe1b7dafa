"""Spark SQL text as sqlglot reads it: where and why a text is no SQL, in SQL's own words.

A SQL app's statements (`millrace.sql.parser`) and ad-hoc queries
(`millrace.warehouse.local_sql`) are parsed by sqlglot, whose errors name its expression
classes (`<class 'sqlglot.expressions.core.EQ'>`) and give no place for a text it cannot
split into tokens; both say it the same way through this module.
"""

from __future__ import annotations

import re

from sqlglot import exp

_QUOTED = {"'": "string", '"': "string", "`": "quoted name"}
_SQLGLOT_CLASS = re.compile(r"<class 'sqlglot\.expressions\.(?:\w+\.)*(?P<name>\w+)'>")
_REQUIRED = re.compile(r"Required keyword: '(?P<arg>\w+)' missing for " + _SQLGLOT_CLASS.pattern)


def untokenizable(text: str) -> tuple[int, str, str]:
    """Where (an offset) and why sqlglot could not split `text` into tokens, and what to do.

    Example:
        >>> untokenizable("SELECT 'news")[:2]
        (7, "the string that starts here with ' is never closed")
    """
    depth_quote, start, index = "", 0, 0
    while index < len(text):
        char = text[index]
        if depth_quote:
            if char == "\\" and depth_quote != "`":
                index += 1  # Spark strings escape with a backslash
            elif char == depth_quote:
                depth_quote = ""
        elif char in _QUOTED:
            depth_quote, start = char, index
        index += 1
    if depth_quote:
        return (
            start,
            f"the {_QUOTED[depth_quote]} that starts here with {depth_quote} is never closed",
            f"end it with a matching {depth_quote}; inside it, write the quote itself twice "
            f"({depth_quote * 2}) or as \\{depth_quote}",
        )
    comment = text.find("/*")
    if comment >= 0:
        return comment, "the comment that starts here with /* is never closed", "end it with */"
    return 0, "the query cannot be read as SQL tokens", "check its quotes, brackets and comments"


def readable(description: str) -> str:
    """The description sqlglot gives of a parse error, with its expression classes as SQL.

    Example:
        >>> readable("Required keyword: 'expression' missing for "
        ...           "<class 'sqlglot.expressions.core.Mul'>")
        '`*` needs an expression after it'
    """
    if match := _REQUIRED.fullmatch(description):
        node = getattr(exp, match["name"], None)
        text = _sql_of(match["name"])
        if match["arg"] == "this" and isinstance(node, type) and issubclass(node, exp.Binary):
            return f"{text} needs an expression before it"
        if match["arg"] in ("this", "expression"):
            return f"{text} needs an expression after it"
        return f"{text} is missing its {match['arg']}"
    return _SQLGLOT_CLASS.sub(lambda found: _sql_of(found["name"]), description)


def _sql_of(name: str) -> str:
    """How the sqlglot expression class `name` reads in SQL: `*` for Mul, `WHERE` for Where."""
    node = getattr(exp, name, None)
    if not (isinstance(node, type) and issubclass(node, exp.Expression)):
        return name
    placeholder = "millrace_placeholder"
    try:
        arguments = {
            arg: exp.column(placeholder) for arg, needed in node.arg_types.items() if needed
        }
        text = node(**arguments).sql(dialect="spark").replace(placeholder, " ")
    except Exception:  # an expression that cannot stand alone: use its name
        text = ""
    text = " ".join(text.split())
    return f"`{text}`" if text else node.key.upper()
