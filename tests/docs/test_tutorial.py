"""docs/tutorial.md runs as written: its Python blocks in order, and the commands it names exist."""

import re
from pathlib import Path

from millrace.cli.main import cli

PAGE = Path(__file__).parents[2] / "docs" / "tutorial.md"


def test_the_tutorials_python_runs_in_order_and_its_assertions_hold() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict = {"__name__": "tutorial"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert namespace["QuerySpikes"].kind() == "stateful"


def test_every_command_the_tutorial_runs_is_a_millrace_command() -> None:
    shell = "\n".join(re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.DOTALL))
    named = set(re.findall(r"(?:^|\| )millrace ([a-z]+)", shell, flags=re.MULTILINE))
    assert named >= {"init", "up", "run", "deploy", "ps", "publish", "tail"}
    assert named <= set(cli.commands), named - set(cli.commands)
