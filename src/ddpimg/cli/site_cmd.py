"""``ddpimg site probe``: draft a site profile for the cluster this runs on.

    ddpimg site probe --out draft.toml                                   # a login node
    srun -N2 --ntasks-per-node 1 ddpimg site probe --out draft.toml      # two compute nodes
    srun -N2 --ntasks-per-node 1 ddpimg doctor --site draft.toml         # then prove it

On a login node it reads Slurm and the container runtimes; as the tasks of a step on two or
more nodes it also measures the network between them (:mod:`ddpimg.probe`). Task 0 writes
the draft; ``--out``'s directory must be on a file system every node sees.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError

DEFAULT_TIMEOUT_S = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    probe = actions.add_parser(
        "probe",
        help="draft a profile for this cluster: Slurm, runtimes, and between two or more nodes "
        "(run under srun) the network",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    probe.add_argument(
        "--out",
        required=True,
        metavar="FILE.toml",
        help="where task 0 writes the draft; its name (without .toml) is the profile's name; "
        "an existing file is replaced only with --force",
    )
    probe.add_argument(
        "--force", action="store_true", help="replace the file --out names if it exists"
    )
    probe.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long a task waits for the others (default {DEFAULT_TIMEOUT_S:g})",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from ddpimg.fsio import check_new
    from ddpimg.probe.run import run_probe
    from ddpimg.site.schema import check_profile_name

    out = Path(args.out).absolute()
    problem = check_profile_name(out.stem)
    if out.suffix != ".toml" or problem:
        raise DdpimgError(
            f"--out {args.out}: a profile is NAME.toml with NAME of letters, digits, '.', '_' "
            "and '-'",
            hint="e.g. --out mycluster.toml (use it as --site mycluster.toml)",
        )
    if args.timeout <= 0:
        raise DdpimgError(f"--timeout {args.timeout:g}: must be positive", hint="--timeout 120")
    check_new(out, force=args.force, flag="--out")  # before the probe's minutes, on every task
    command = shlex.join(["ddpimg", *argv])
    if run_probe(dict(os.environ), out, args.timeout, command):
        print(f"ddpimg: drafted {out}; prove it with: srun -N2 --ntasks-per-node 1 ddpimg doctor "
              f"--site {shlex.quote(str(out))}", file=sys.stderr)  # fmt: skip
    return exitcodes.OK
