"""A sweep's train command: the words every point shares, and each point's own.

A swept NAME is a ``train`` option (``lr``, ``global-batch-size``, ``seed``, ``size``,
``deterministic``), spelled as the option without its dashes (``global_batch_size`` too), or,
for ``train --script``, a placeholder ``{NAME}`` in the script's arguments (after its file),
replaced by the point's value wherever it stands (``--lr={lr}``, ``{lr}``). A value option
becomes ``--NAME=VALUE`` after the shared options, so it overrides a value given there (the
last one wins); a flag takes ``true`` or ``false`` (``--deterministic`` or nothing,
``--sync-batchnorm`` or ``--no-sync-batchnorm``).

The command line's parser is the CLI's (this package stands below it): the caller hands over
its actions (``option_forms``) and a function that parses a point's words as ``train`` would
and checks the resulting configuration (``check_points``), so a value the option refuses is
refused with the option's own words before any point starts.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ddpimg.errors import DdpimgError
from ddpimg.sweep.spec import Point, Sweep, SweepError

SCRIPT = "--script"
OUT = "--out"
# The sweep's own options (each with a value): they are not the points' train options.
SWEEP_OPTIONS = ("--sweep", "--trials", "--sweep-seed", "--max-points", "--parallel")
# Options a sweep sets for each point itself, or that a point cannot take.
NOT_SWEPT: Mapping[str, str] = {
    "out": "each point writes into a directory of its own under the sweep's (--out names "
    "the sweep's directory)",
    "resume": "each point continues itself (--resume auto)",
    "script": "the script is the same for every point; sweep a {NAME} in its arguments",
    "local-rank": "a launcher's option, not a training one",
    "local_rank": "a launcher's option, not a training one",
    "help": "not a training option",
    **{option[2:]: "an option of the sweep itself" for option in SWEEP_OPTIONS},
}
TRUE, FALSE = "true", "false"
_PLACEHOLDER = re.compile(r"\{([A-Za-z][A-Za-z0-9_-]{0,39})\}")


@dataclass(frozen=True)
class SweptCommand:
    """A train command cut for a sweep: ``options``, the words before ``--script`` without
    ``--out`` and the sweep's own options; ``out``, the ``--out`` given (the sweep's
    directory), else None; ``script``, ``--script FILE ARGS`` or nothing."""

    options: tuple[str, ...]
    out: str | None
    script: tuple[str, ...]

    @property
    def shared(self) -> tuple[str, ...]:
        """The words that define the sweep's command (its digest)."""
        return (*self.options, *self.script)


def split_command(words: Sequence[str], strip: Sequence[str] = SWEEP_OPTIONS) -> SweptCommand:
    """``words`` (a train command's arguments, after ``train``) cut as ``SweptCommand``
    says, without the options ``strip`` names (each with its value)."""
    options: list[str] = []
    out: str | None = None
    skip_next = False
    taking_out = False
    for position, word in enumerate(words):
        if skip_next:
            skip_next = False
            if taking_out:
                out, taking_out = word, False
            continue
        if word == SCRIPT:
            return SweptCommand(tuple(options), out, tuple(words[position:]))
        if word in strip or word == OUT:
            skip_next, taking_out = True, word == OUT
        elif word.startswith(f"{OUT}="):
            out = word[len(OUT) + 1 :]
        elif not any(word.startswith(f"{option}=") for option in strip):
            options.append(word)
    return SweptCommand(tuple(options), out, ())


@dataclass(frozen=True)
class OptionForm:
    """How a ``train`` option is written: ``--NAME=VALUE``, or for a flag (``switch``
    store_true / store_false / both) the flag, its ``--no-`` form or nothing."""

    flag: str
    switch: str = ""

    def words(self, value: str) -> list[str]:
        if not self.switch:
            return [f"{self.flag}={value}"]
        on = value.lower() == TRUE
        if self.switch == "both":
            return [self.flag if on else "--no-" + self.flag[2:]]
        wanted = on if self.switch == "store_true" else not on
        return [self.flag] if wanted else []


def option_forms(parser: argparse.ArgumentParser) -> dict[str, OptionForm]:
    """Every option of ``parser`` a point can take, by its name without dashes."""
    forms: dict[str, OptionForm] = {}
    for action in parser._actions:
        long_names = [name for name in action.option_strings if name.startswith("--")]
        if not long_names or action.nargs == argparse.REMAINDER:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            switch = "both"
        elif isinstance(action, argparse._StoreTrueAction):
            switch = "store_true"
        elif isinstance(action, argparse._StoreFalseAction):
            switch = "store_false"
        elif action.nargs == 0 or isinstance(action, argparse._AppendAction):
            continue  # --help, --version; lists (--keep-env) add up rather than vary
        else:
            switch = ""
        for name in long_names:
            if not name.startswith("--no-") or switch != "both":
                forms[name[2:]] = OptionForm(long_names[0], switch)
    return forms


class PointCommands:
    """Each point's train command: the shared ``command`` with the point's options after its
    options, ``--out`` its directory, and its values in the script's placeholders."""

    def __init__(
        self, command: SweptCommand, sweep: Sweep, forms: Mapping[str, OptionForm]
    ) -> None:
        self.command = command
        self.placeholders: set[str] = set()
        self.forms: dict[str, OptionForm] = {}
        found = _placeholders(command.script[2:])
        for axis in sweep.axes:
            if command.script:
                if axis.name not in found:
                    raise _no_placeholder(axis.name, found)
                self.placeholders.add(axis.name)
                continue
            self.forms[axis.name] = _form(axis.name, forms)
            switch = self.forms[axis.name].switch
            values = [axis.kind] if axis.drawn else list(axis.values)
            bad = [value for value in values if switch and value.lower() not in (TRUE, FALSE)]
            if bad:
                raise SweepError(
                    f"--sweep {axis.name}: {self.forms[axis.name].flag} is a flag, and "
                    f"{bad[0]!r} is not {TRUE} or {FALSE}",
                    hint=f"--sweep {axis.name}={TRUE},{FALSE}",
                )

    def option_words(self, point: Point) -> list[str]:
        """The point's own train options (none for a script's placeholders)."""
        words: list[str] = []
        for name, value in point.values:
            if name in self.forms:
                words += self.forms[name].words(value)
        return words

    def script_words(self, point: Point) -> list[str]:
        """``--script FILE ARGS`` with the point's values in the placeholders."""
        if not self.command.script:
            return []
        head, args = list(self.command.script[:2]), self.command.script[2:]
        values = point.value_map
        return head + [
            _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), word)
            for word in args
        ]

    def tail(self, point: Point, out: str) -> list[str]:
        """What follows the shared options: the point's options, ``--out``, the script."""
        return [*self.option_words(point), OUT, out, *self.script_words(point)]

    def words(self, point: Point, out: str) -> list[str]:
        """The point's whole train command (after ``train``)."""
        return [*self.command.options, *self.tail(point, out)]


def check_points(
    commands: PointCommands,
    points: Sequence[Point],
    parse: Callable[[list[str]], object],
) -> None:
    """Parse every point's command with ``parse`` (the CLI's train parser and config check,
    raising DdpimgError with the option's own words); SweepError naming the first point
    it refuses."""
    for point in points:
        try:
            parse(commands.words(point, "sweep-point"))
        except DdpimgError as err:
            raise SweepError(
                f"--sweep: the point {point.words()} is refused: {err.message}",
                hint=err.hint or "give --sweep values the option takes (train --help)",
            ) from err


def _placeholders(words: Sequence[str]) -> list[str]:
    found: list[str] = []
    for word in words:
        found += [name for name in _PLACEHOLDER.findall(word) if name not in found]
    return found


def _no_placeholder(name: str, found: Sequence[str]) -> SweepError:
    there = ", ".join("{" + item + "}" for item in found) or "none"
    return SweepError(
        f"--sweep {name}: train --script takes a sweep's values in the script's arguments, "
        f"and they hold no {{{name}}} (placeholders found: {there})",
        hint=f"write {{{name}}} where the value goes: train --script train.py --{name} {{{name}}}",
    )


def _form(name: str, forms: Mapping[str, OptionForm]) -> OptionForm:
    key = name.replace("_", "-")
    if key in NOT_SWEPT or name in NOT_SWEPT:
        raise SweepError(
            f"--sweep {name}: --{key} is not swept: {NOT_SWEPT.get(key, NOT_SWEPT.get(name))}",
            hint="sweep a training option: lr, seed, global-batch-size, ...",
        )
    if key in forms:
        return forms[key]
    close = difflib.get_close_matches(key, list(forms), n=3)
    maybe = f"did you mean {', '.join('--' + item for item in close)}?" if close else ""
    raise SweepError(
        f"--sweep {name}: train has no option --{key}",
        hint=(maybe + " " if maybe else "")
        + "NAME is a train option without its dashes (train --help lists them), or a "
        "{NAME} placeholder in a train --script's arguments",
    )
