"""What the build needs of a nox session: ``nox.Session`` has it, and tests can fake it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, Protocol


class Session(Protocol):
    """Commands run, logged and failed through nox (``nox.Session``'s methods of these names)."""

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        silent: bool = False,
        external: bool = False,
    ) -> Any: ...

    def install(self, *args: str) -> None: ...

    def log(self, *args: Any) -> None: ...

    def warn(self, *args: Any) -> None: ...

    def error(self, *args: Any) -> NoReturn: ...
