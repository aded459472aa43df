"""Command line: ``ddpimg env|train|doctor|sbatch|plot`` and ``train`` (== ``ddpimg train``).

Each command is a chain of small steps (build parser -> parse -> run); only ``run`` touches
the process. Heavy imports happen inside the commands that need them, so ``ddpimg env``
never imports torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ddpimg import __version__, exitcodes
from ddpimg.cli import doctor_cmd, env_cmd, plot_cmd, sbatch_cmd, train_cmd
from ddpimg.errors import DdpimgError, RendezvousError

COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "env": ("print the resolved topology, site and environment (no torch)", env_cmd.add_arguments),
    "train": ("run a bundled trainer or your own script", train_cmd.add_arguments),
    "doctor": (
        "check ranks, devices, network and all-reduce on every rank",
        doctor_cmd.add_arguments,
    ),
    "sbatch": (
        "render (and submit) a Slurm batch script for a site, an image and a train command",
        sbatch_cmd.add_arguments,
    ),
    "plot": (
        "plot loss/accuracy per epoch and throughput/scaling of several runs",
        plot_cmd.add_arguments,
    ),
}
RUNNERS: dict[str, Callable[[argparse.Namespace, list[str]], int]] = {
    "env": env_cmd.run,
    "train": train_cmd.run,
    "doctor": doctor_cmd.run,
    "sbatch": sbatch_cmd.run,
    "plot": plot_cmd.run,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddpimg",
        description="Resolve ranks and the site, then train the same way on any cluster.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"ddpimg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments) in COMMANDS.items():
        add_arguments(
            sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        )
    return parser


def report_error(err: DdpimgError) -> int:
    print(f"ddpimg: error: {err}", file=sys.stderr, flush=True)
    return exitcodes.RENDEZVOUS_FAILED if isinstance(err, RendezvousError) else exitcodes.USAGE


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    namespace = build_parser().parse_args(args)
    try:
        return RUNNERS[namespace.command](namespace, args)
    except DdpimgError as err:
        return report_error(err)


def train_main() -> int:
    """The ``train`` command: ``ddpimg train`` with the same arguments."""
    return main(["train", *sys.argv[1:]])
