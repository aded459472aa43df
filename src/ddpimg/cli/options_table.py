"""``train``'s options as Markdown tables, read from the real argparse parser, so that the
documented options cannot drift from the code (docs/usage.md keeps the output between
``<!-- train-options -->`` markers; tests/cli/test_options_table.py compares them).

    python -m ddpimg.cli.options_table                      # print the tables
    python -m ddpimg.cli.options_table --update docs/usage.md   # rewrite the region there
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

# argparse offers no public way to walk a parser's groups and actions; the private names used
# here (_actions, _action_groups, _group_actions, _expand_help) are the ones its own help
# formatter reads, unchanged since Python 3.2.
REGION = "train-options"
# argparse's own group titles, said for a reader of the docs.
TITLES = {"positional arguments": "the trainer (positional)", "options": "common options"}
UPDATE_COMMAND = "python -m ddpimg.cli.options_table --update docs/usage.md"


def train_parser() -> argparse.ArgumentParser:
    """The parser ``train`` parses with (the ``train`` sub-command of ``ddpimg``)."""
    from ddpimg.cli import build_parser

    parser = build_parser("train", "train")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]  # type: ignore[no-any-return]


def _cell(text: str) -> str:
    """Text in a table cell: one line, its pipes escaped (GitHub and Python-Markdown both
    read ``\\|`` outside a code span as a literal pipe)."""
    return " ".join(text.split()).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    """``--name METAVAR`` (or the choices, or the positional's choices), as code spans."""
    if not action.option_strings:
        return " \\| ".join(f"`{choice}`" for choice in action.choices or ())
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        return ", ".join(f"`{name}`" for name in action.option_strings)
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.dest.upper()
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    return f"{names} {_cell(value)}"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as ``--help`` prints it (``%(default)s`` and the like expanded)."""
    formatter = parser._get_formatter()
    return _cell(formatter._expand_help(action))


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """One table per help group of ``train --help`` (the common options, then each trainer's
    and each feature's), in ``--help``'s order, without ``-h``."""
    parser = parser or train_parser()
    parts: list[str] = []
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
        ]
        if not actions:
            continue
        title = TITLES.get(group.title or "", group.title)
        parts += [f"**{title}**", "", "| option | meaning |", "|---|---|"]
        parts += [f"| {_option(a)} | {_help(parser, a)} |" for a in actions]
        parts.append("")
    return "\n".join(parts)


def region_of(text: str) -> str:
    """The text between the region's markers (exactly one pair)."""
    begin, end = f"<!-- {REGION} -->\n", f"<!-- /{REGION} -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"no single {begin.strip()} ... {end} pair")
    return text.split(begin, 1)[1].split(end, 1)[0]


def update(path: Path) -> bool:
    """Rewrite ``path``'s region with the tables of now; True when it changed."""
    text = path.read_text(encoding="utf-8")
    old = region_of(text)
    new = render()
    if old == new:
        return False
    begin = f"<!-- {REGION} -->\n"
    head, rest = text.split(begin, 1)
    path.write_text(head + begin + new + rest[len(old) :], encoding="utf-8")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m ddpimg.cli.options_table", description=__doc__)
    cli.add_argument("--update", type=Path, metavar="FILE", help="rewrite FILE's region")
    args = cli.parse_args(argv)
    if args.update is None:
        sys.stdout.write(render())
        return 0
    changed = update(args.update)
    print(f"{args.update}: {'updated' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
