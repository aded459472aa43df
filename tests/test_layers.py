"""The arrows between the package's layers point down (docs/DESIGN.md, "Data flow"): nothing
below the command line imports it, and the layers under the trainers (resolution, plan,
runtime) import no trainer, script runtime or tracker; no module imports the package root
(``ddpimg/__init__.py``, the public API for users' scripts) and no import runs in a circle.
Lazy imports inside functions and those under ``if TYPE_CHECKING:`` count."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ddpimg"
# The layers the trainers, the script runtime and the trackers stand on.
LOWER = ("cleanenv.py", "plan.py", "host.py", "topology", "site", "hardware", "runtime")
UPPER = ("ddpimg.cli", "ddpimg.train", "ddpimg.script", "ddpimg.trackers")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names), wherever the import statement is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _modules(*parts: str) -> list[Path]:
    found: list[Path] = []
    for part in parts:
        path = PACKAGE / part
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


@pytest.mark.parametrize(
    "path",
    [p for p in _modules(".") if p.parent.name != "cli" and p.name != "__main__.py"],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_nothing_below_the_command_line_imports_it(path: Path) -> None:
    assert not [name for name in imported(path) if _within(name, ("ddpimg.cli",))]


@pytest.mark.parametrize("path", _modules(*LOWER), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_lower_layers_import_no_upper_one(path: Path) -> None:
    assert not [name for name in imported(path) if _within(name, UPPER)]


def test_the_walk_sees_lazy_imports() -> None:
    # run_checks imports the runtime inside the function: a walk of the top level only
    # would miss the arrows this file guards.
    assert "ddpimg.runtime.links.judge_links" in imported(PACKAGE / "runtime" / "doctor.py")


def module_name(path: Path) -> str:
    """``ddpimg.train.config`` for src/ddpimg/train/config.py, ``ddpimg.train`` for its
    package's ``__init__.py``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """For each module, the package's modules its import statements name (``named``)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = named(path, package, modules) - {name}
    return graph


def named(path: Path, package: str, modules: Mapping[str, Path]) -> set[str]:
    """The ``modules`` that ``path``'s import statements name, wherever they are (``package``:
    the one relative imports start from): ``from a import b`` names the module ``a.b`` when
    there is one, else ``a`` (a name defined in ``a``); ``import a.b`` names ``a.b``. The
    packages above a named module run too, but as Python's mechanics, not as an arrow of
    the design."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*above, *([node.module] if node.module else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    targets.add(target)
                elif base in modules:
                    targets.add(base)
    return targets


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One circle through each group of modules that import one another (Tarjan's strongly
    connected components), as the path ``a, b, ..., a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: set[str] = set()
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(_circle(node, group, graph))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _circle(start: str, group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest path from ``start`` back to it within ``group`` (breadth first)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & group):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no circle through {start}")


def test_no_import_runs_in_a_circle() -> None:
    circles = [" -> ".join(circle) for circle in cycles(import_graph(MODULES))]
    assert circles == []


def test_no_module_imports_the_package_root() -> None:
    """The root is the users' API (``import ddpimg``); a module inside, or a benchmark, takes
    what it needs from the leaf that defines it (``ddpimg.version``, ``ddpimg.exitcodes``)."""
    graph = import_graph(MODULES)
    assert sorted(name for name, targets in graph.items() if "ddpimg" in targets) == []
    benchmarks = sorted((PACKAGE.parents[1] / "benchmarks").rglob("*.py"))
    assert benchmarks
    assert [str(path) for path in benchmarks if "ddpimg" in named(path, "", MODULES)] == []


def test_the_circle_finder_sees_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    """The graph and the finder, on a package of three modules: ``a`` imports ``b`` at the
    top, ``b`` imports ``c`` under TYPE_CHECKING, ``c`` imports ``a`` inside a function."""
    package = tmp_path / "ddpimg"
    package.mkdir()
    sources = {
        "__init__.py": "from ddpimg.version import __version__\n",
        "version.py": "",
        "a.py": "from ddpimg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ddpimg.c import X\n",
        "c.py": "X = 1\ndef f():\n    import ddpimg.a\n    from ddpimg import __version__\n",
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    modules = {
        ".".join(["ddpimg", *([] if name == "__init__.py" else [name[:-3]])]): package / name
        for name in sources
    }
    graph = import_graph(modules)
    assert graph["ddpimg.c"] == {"ddpimg.a", "ddpimg"}
    assert cycles(graph) == [["ddpimg.a", "ddpimg.b", "ddpimg.c", "ddpimg.a"]]
