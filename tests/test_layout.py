"""The source tree keeps its architecture: layers, owners, no circles, short modules.

These read `src/millrace` as text (its syntax trees), as the CLI's import test reads what a
verb loads: each names the files that break a rule, so a change that builds a workspace path
by hand, opens a Delta table or a Spark Kafka reader outside its owner, or imports up a
layer, fails here with the place to fix.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).parents[1] / "src" / "millrace"

# The README's layout paragraph, from the top floor down: imports only go down this list.
LAYERS = [
    ["cli"],
    ["api", "testing"],
    ["monitor"],
    ["ops"],
    ["apps"],
    ["sql", "processor"],
    ["serving", "warehouse"],
    ["engine"],
    ["bus"],
    ["config"],
    ["records"],
    ["errors"],
]
LONG_MODULES = {"sql/parser.py", "sql/compiler.py"}
# The Workspace's folders: a path below one of them is named by config/workspace.py alone.
WORKSPACE_FOLDERS = {
    "root",
    "storage",
    "checkpoints_dir",
    "tables_dir",
    "logs_dir",
    "warehouse_dir",
    "apps_dir",
    "kafka_dir",
    "redis_dir",
}
WORKSPACE_FILES = {
    "app.json",
    "exit.json",
    "app.log",
    "driver.lock",
    "driver.json",
    "driver_cpu.json",
    "checkpoints.json",
    "millrace-state.json",
    "routed.json",
    "pending_timers.json",
    "streams.json",
    "millrace.toml",
}
SPARK_PRIVATE = {"_jsq", "_jvm", "_gateway", "_jsc", "_ensure_initialized", "_jlistenerobj"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SOURCE.rglob("*.py")):
        yield path.relative_to(SOURCE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def _strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The string constants of `tree` that are code, not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def _format_calls(module: str, tree: ast.Module, name: str) -> list[str]:
    """The places in `tree` that call `.format(name)`, as Spark's readers and writers take it."""
    return [
        f"{module}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and [ast.unparse(argument) for argument in node.args] == [repr(name)]
    ]


def _breaking(rule: str, found: list[str]) -> str:
    return f"{rule}:\n  " + "\n  ".join(found)


def test_imports_only_go_down_the_layers_of_the_readme() -> None:
    floor = {package: level for level, packages in enumerate(LAYERS) for package in packages}
    found = []
    for module, tree in _modules():
        package = module.split("/")[0].removesuffix(".py")
        for line, imported in _imports(tree):
            parts = imported.split(".")
            if parts[0] != "millrace" or len(parts) < 2 or parts[1] not in floor:
                continue
            if package in floor and parts[1] != package and floor[parts[1]] <= floor[package]:
                found.append(f"{module}:{line}: {package} imports {imported}")
    assert not found, _breaking("an import that does not go down the layers", found)


def test_no_module_imports_itself_back_through_others() -> None:
    modules = {}
    for module, tree in _modules():
        name = "millrace." + module.removesuffix(".py").replace("/", ".")
        modules[name.removesuffix(".__init__")] = tree
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        targets = set()
        for _, imported in _imports(tree):
            while imported not in modules and "." in imported:
                imported = imported.rpartition(".")[0]
            if imported in modules and imported not in (name, "millrace"):
                targets.add(imported)
        graph[name] = targets
    circles = [component for component in _strongly_connected(graph) if len(component) > 1]
    assert not circles, _breaking("modules that import each other", [str(c) for c in circles])


def test_no_module_is_longer_than_700_lines_but_the_sql_parser_and_compiler() -> None:
    found = [
        f"{path.relative_to(SOURCE).as_posix()}: {lines} lines"
        for path in SOURCE.rglob("*.py")
        if path.relative_to(SOURCE).as_posix() not in LONG_MODULES
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > 700
    ]
    assert not found, _breaking("a module over 700 lines", found)


def test_only_the_workspace_builds_a_path_in_the_workspace() -> None:
    found = []
    for module, tree in _modules():
        if module == "config/workspace.py":
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and isinstance(node.left, ast.Attribute)
                and node.left.attr in WORKSPACE_FOLDERS
                and ast.unparse(node.left.value).endswith("workspace")
            ):
                found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
        found += [
            f"{module}:{line}: {text!r}" for line, text in _strings(tree) if text in WORKSPACE_FILES
        ]
    assert not found, _breaking("a workspace path built outside config/workspace.py", found)


def test_only_the_delta_owner_opens_a_delta_table_or_its_log() -> None:
    found = []
    for module, tree in _modules():
        if module == "warehouse/delta.py":
            continue
        found += [
            f"{module}:{line}: imports {name}"
            for line, name in _imports(tree)
            if name.split(".")[0] in ("deltalake", "delta")
        ]
        found += _format_calls(module, tree, "delta")
        found += [
            f"{module}:{line}: {text!r}" for line, text in _strings(tree) if text == "_delta_log"
        ]
    assert not found, _breaking("Delta I/O outside warehouse/delta.py", found)


def test_only_the_kafka_factory_assembles_a_spark_kafka_reader_or_writer() -> None:
    found = []
    for module, tree in _modules():
        if module in ("engine/kafka.py", "bus/client_config.py"):
            continue
        found += [
            f"{module}:{line}: imports {name}"
            for line, name in _imports(tree)
            if name.endswith(".spark_kafka_options")
        ]
        found += _format_calls(module, tree, "kafka")
    assert not found, _breaking("Spark's Kafka I/O outside engine/kafka.py", found)


def test_only_the_adapter_touches_sparks_private_api() -> None:
    found = [
        f"{module}:{node.lineno}: {ast.unparse(node)}"
        for module, tree in _modules()
        if module != "engine/spark_internals.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in SPARK_PRIVATE
    ]
    assert not found, _breaking("Spark's private API outside engine/spark_internals.py", found)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components
