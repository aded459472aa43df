"""A stand-in for the nox session that containers/imagebuild's functions take."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn


class SessionError(Exception):
    """What nox's session.error raises (a failed session), for the tests to match."""


class FakeSession:
    """Records what the build asked nox to do; runs nothing."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []
        self.envs: list[Mapping[str, str] | None] = []
        self.installs: list[tuple[str, ...]] = []
        self.logs: list[str] = []
        self.warnings: list[str] = []

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        silent: bool = False,
        external: bool = False,
    ) -> Any:
        self.runs.append(list(args))
        self.envs.append(env)
        return ""

    def install(self, *args: str) -> None:
        self.installs.append(args)

    def log(self, *args: Any) -> None:
        self.logs.append(" ".join(map(str, args)))

    def warn(self, *args: Any) -> None:
        self.warnings.append(" ".join(map(str, args)))

    def error(self, *args: Any) -> NoReturn:
        raise SessionError(" ".join(map(str, args)))
