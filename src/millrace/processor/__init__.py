"""Processor apps: Python classes with per-key state, timers and productions (MillWheel, Stylus).

`Processor` and `Input` declare an app, `ValueState`, `ListState` and `MapState` its per-key
state, `Count`, `Sum`, `Min`, `Max` and `TopK` a monoid processor's aggregate; `execution` runs
one micro-batch of it over stored state, the same way in `millrace.testing.ProcessorTester` and
on Spark. See docs/processor.md.

Example:
    >>> from millrace.processor import Input, MapState, Processor
"""

from millrace.processor.aggregates import Count, Max, Min, Sum, TopK
from millrace.processor.context import Context, Production
from millrace.processor.processor import Input, Processor
from millrace.processor.state import ListState, MapState, ValueState
from millrace.processor.timers import Timer

__all__ = [
    "Context",
    "Count",
    "Input",
    "ListState",
    "MapState",
    "Max",
    "Min",
    "Processor",
    "Production",
    "Sum",
    "Timer",
    "TopK",
    "ValueState",
]
