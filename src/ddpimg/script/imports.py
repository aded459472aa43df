"""Run a function once a module has been imported, whoever imports it and whenever.

The boot must not import transformers or Lightning itself (seconds of start-up for a script
that uses neither, and an import order the script did not choose), yet ddpimg's callbacks
must reach the first ``Trainer`` the script makes. ``when_imported(name, hook)`` calls
``hook(module)`` at once if ``name`` is already imported, else right after its first import
completes: a finder on ``sys.meta_path`` finds the module's spec through the other finders
and wraps its loader so that ``hook`` runs after the module's code. Nothing else about the
import changes. A hook that fails is reported once on stderr and the script goes on without
it: an integration is a convenience, never a reason for a run to fail.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]


def _run(name: str, hooks: Sequence[Hook], module: ModuleType) -> None:
    for hook in hooks:
        try:
            hook(module)
        except Exception as err:  # an integration must never break the script
            print(
                f"ddpimg: warning: its integration with {name} could not attach "
                f"({type(err).__name__}: {err}); the run goes on without it",
                file=sys.stderr,
                flush=True,
            )


class _HookedLoader(importlib.abc.Loader):
    """The module's own loader, with the hooks run after ``exec_module``."""

    def __init__(self, loader: importlib.abc.Loader, name: str, hooks: list[Hook]) -> None:
        self._loader = loader
        self._name = name
        self._hooks = hooks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _run(self._name, self._hooks, module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_resource_reader, ...: inspect and importlib.resources keep working.
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.pending: dict[str, list[Hook]] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, fullname, self.pending.pop(fullname))
        return spec


_finder = _PostImportFinder()


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once module ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, [hook], module)
        return
    _finder.pending.setdefault(name, []).append(hook)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
