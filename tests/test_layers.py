"""The arrows between the package's layers point down (docs/DESIGN.md, "Data flow"): nothing
below the command line imports it, and the layers under the trainers (resolution, plan,
runtime) import no trainer, script runtime or tracker. Lazy imports inside functions count."""

from __future__ import annotations

import ast
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
