"""``ddpimg env``: what ddpimg resolves here, without importing torch."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from ddpimg import exitcodes
from ddpimg.cli.launch_options import SITE_OPTIONS
from ddpimg.host import short_hostname
from ddpimg.plan import build_plan

if TYPE_CHECKING:
    import argparse

# Every option, written once for argparse (add_arguments) and for parse_plain:
# option -> (metavar, None for an on/off flag; repeatable; help).
OPTIONS: dict[str, tuple[str | None, bool, str]] = {
    "--json": (None, False, "print one JSON object"),
    "--explain": (None, False, "say how each value was decided"),
    **SITE_OPTIONS,
}


def _dest(option: str) -> str:
    """The attribute an option sets, named the way argparse names it."""
    return option.removeprefix("--").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ddpimg.cli.launch_options import add_local_rank_argument

    add_local_rank_argument(parser)
    for option, (metavar, repeatable, help_text) in OPTIONS.items():
        if metavar is None:
            parser.add_argument(option, action="store_true", help=help_text)
        elif repeatable:
            parser.add_argument(
                option, action="append", default=[], metavar=metavar, help=help_text
            )
        else:
            parser.add_argument(option, metavar=metavar, help=help_text)


def parse_plain(argv: list[str]) -> argparse.Namespace | None:
    """``argv`` (what follows ``env``) parsed without argparse, or None.

    Every rank of a job runs ``ddpimg env`` at start-up, and building argparse's parsers costs
    more than resolving the environment. Only the forms where argparse gives the same result
    are taken here: known options spelt in full, ``--opt VALUE`` and ``--opt=VALUE`` with a
    value that is not empty and does not start with '-'. Anything else (help, an unknown or
    abbreviated option, a missing or odd value) gives None, and argparse parses it or reports
    the usage error.
    """
    values: dict[str, Any] = {"command": "env", "local_rank": None, "local_rank_option": None}
    for option, (metavar, repeatable, _) in OPTIONS.items():
        values[_dest(option)] = [] if repeatable else None if metavar else False
    items = iter(argv)
    for item in items:
        option, equals, value = item.partition("=")
        if option not in OPTIONS:
            return None
        metavar, repeatable, _ = OPTIONS[option]
        if metavar is None:
            if equals:
                return None
            values[_dest(option)] = True
            continue
        if not equals:
            value = next(items, "")
        if not value or value.startswith("-"):
            return None
        if repeatable:
            values[_dest(option)].append(value)
        else:
            values[_dest(option)] = value
    # argparse.Namespace is a plain attribute holder too; importing argparse is what costs.
    return cast("argparse.Namespace", SimpleNamespace(**values))


def run(args: argparse.Namespace, argv: list[str]) -> int:
    plan = build_plan(
        dict(os.environ),
        short_hostname(),
        site=args.site,
        keep=tuple(args.keep_env),
        local_rank=args.local_rank,
    )
    data = plan.to_json()
    if args.explain:
        # The add-ons mounted here, and whether each fits this image (read only here: no
        # cost for the plain `ddpimg env` every rank runs).
        from ddpimg.addon.mounted import addon_records, explain_lines

        data["explain"] = [*plan.notes, *explain_lines(os.environ)]
        data["addons"] = addon_records(os.environ)
    if args.json:
        import json

        print(json.dumps(data, indent=2, sort_keys=True))
        return exitcodes.OK
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key in ("env", "removed", "explain", "hosts", "addons"):
            continue
        print(f"{key:<{width}}  {value}")
    print("env:")
    for name, value in data["env"].items():
        print(f"  {name}={value}")
    print(f"removed: {', '.join(data['removed']) or '(none)'}")
    if args.explain:
        print("explain:")
        for note in data["explain"]:
            print(f"  - {note}")
    return exitcodes.OK
