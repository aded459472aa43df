"""A trainer's own options, declared once: a frozen dataclass per trainer.

Each field is one ``train`` flag of that trainer, built by ``option`` with its help text,
the default the trainer applies when it is left out, and its checks; the command line
(``ddpimg.cli.train_options``), the checks on construction and the checkpoint fingerprint
(which options may change on resume) are derived from the fields. A field is None unless
its flag was given, so that manifest.json's ``arguments`` keep saying what was asked for.
Imports neither torch, nor any trainer, nor ``ddpimg.train.config`` (which imports this module).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, TypeVar

from ddpimg.errors import DdpimgError

_FLAG = "ddpimg.flag"
# The value types a flag can carry: bool fields are ``--flag`` / ``--no-flag``.
_KINDS = (bool, int, str)
_Options = TypeVar("_Options", bound="TrainerOptions")


@dataclass(frozen=True)
class Flag:
    """What one option field declares about its flag."""

    help: str
    #: What the trainer uses when the flag is left out, as ``train --help`` shows it.
    default: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: The smallest value accepted, and the hint of the error that refuses a smaller one.
    minimum: int | None = None
    hint: str = ""
    #: May differ between a run and its resumption (not part of the checkpoint fingerprint).
    free_to_change: bool = False


def option(
    help: str,
    *,
    default: str,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    minimum: int | None = None,
    hint: str = "",
    free_to_change: bool = False,
) -> Any:
    """A field of a trainer's options: None unless the flag ``--<field-name>`` was given."""
    flag = Flag(help, default, metavar, choices, minimum, hint, free_to_change)
    return field(default=None, metadata={_FLAG: flag})


@dataclass(frozen=True)
class OptionField:
    """One option of a trainer, as the command line and the checks see it."""

    name: str
    #: The value's type (the field is ``kind | None``).
    kind: type[Any]
    flag: Flag

    @property
    def option(self) -> str:
        """The flag, e.g. ``--image-size`` for the field ``image_size``."""
        return "--" + self.name.replace("_", "-")


def check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    """DdpimgError naming ``flag`` when ``value`` is not one of ``choices``."""
    if value not in choices:
        raise DdpimgError(
            f"{flag} must be one of {', '.join(choices)}, got {value!r}",
            hint=f"pick one of {', '.join(choices)}",
        )


def check_at_least(flag: str, value: int | None, minimum: int, hint: str) -> None:
    """DdpimgError naming ``flag`` when it was given (not None) and is below ``minimum``."""
    if value is not None and value < minimum:
        raise DdpimgError(f"{flag} must be at least {minimum}, got {value}", hint=hint)


class HoldsOptions(Protocol):
    """What holds a trainer's options: a ``TrainConfig`` (``ddpimg.train.config``, which
    imports this module, not the other way round)."""

    @property
    def options(self) -> TrainerOptions: ...


@dataclass(frozen=True)
class TrainerOptions:
    """The options of one trainer; this class itself: a trainer without options of its own
    (mnist), or none of the trainer's flags given. Checked on construction: each field
    against what its ``option`` declares, then ``check``."""

    def __post_init__(self) -> None:
        for item in option_fields(type(self)):
            value: Any = getattr(self, item.name)
            if value is None:
                continue
            # bool is an int to isinstance; a flag's value is one or the other.
            if type(value) is not item.kind:
                raise TypeError(f"{item.option}: {value!r} is not a {item.kind.__name__}")
            if item.flag.choices is not None:
                check_choice(item.option, value, item.flag.choices)
            if item.flag.minimum is not None:
                check_at_least(item.option, value, item.flag.minimum, item.flag.hint)
        self.check()

    def check(self) -> None:
        """The checks a field's declaration cannot say: between fields, or with a message
        of their own (DdpimgError naming the flag)."""

    @classmethod
    def of(cls: type[_Options], config: HoldsOptions) -> _Options:
        """``config``'s options as this trainer's (``cls()`` when ``config`` was made
        without any)."""
        options = config.options
        if isinstance(options, cls):
            return options
        if type(options) is TrainerOptions:
            return cls()
        raise TypeError(f"{type(options).__name__} given where {cls.__name__} is expected")


def option_fields(options: type[TrainerOptions]) -> tuple[OptionField, ...]:
    """The options ``options`` declares, in their order (``train --help``'s)."""
    hints = typing.get_type_hints(options)
    declared = []
    for item in fields(options):
        flag = item.metadata.get(_FLAG)
        kinds = [kind for kind in typing.get_args(hints[item.name]) if kind is not type(None)]
        if not isinstance(flag, Flag) or len(kinds) != 1 or kinds[0] not in _KINDS:
            raise TypeError(
                f"{options.__name__}.{item.name}: declare it as `bool | None`, `int | None` or "
                "`str | None` with option(...)"
            )
        declared.append(OptionField(item.name, kinds[0], flag))
    return tuple(declared)
