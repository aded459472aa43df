"""``ddpimg env``: what ddpimg resolves here, without importing torch."""

from __future__ import annotations

import argparse
import json
import os

from ddpimg.plan import build_plan, short_hostname


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--site", metavar="NAME|PATH", help="site profile (default: auto)")
    parser.add_argument("--explain", action="store_true", help="say how each value was decided")
    parser.add_argument(
        "--keep-env",
        action="append",
        default=[],
        metavar="PATTERN",
        help="host variable (fnmatch pattern) to keep in the training environment",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    plan = build_plan(dict(os.environ), short_hostname(), site=args.site, keep=tuple(args.keep_env))
    data = plan.to_json()
    if args.explain:
        data["explain"] = list(plan.notes)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    width = max(len(k) for k in data)
    for key, value in data.items():
        if key in ("env", "removed", "explain", "hosts"):
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
    return 0
