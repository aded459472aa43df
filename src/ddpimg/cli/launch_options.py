"""Launch options that several commands share, declared once.

Importing this module imports neither argparse nor the runtime: ``ddpimg env`` reads
``SITE_OPTIONS`` for its argparse-free parser (see ``cli/__init__``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from ddpimg.plan import LaunchPlan

# The old launchers pass the local rank as an argument: torch.distributed.launch (without
# --use-env) as --local-rank=N, DeepSpeed's launcher as --local_rank=N.
LOCAL_RANK_OPTIONS = ("--local-rank", "--local_rank")

# The options that choose the site and the environment: option -> (metavar, repeatable, help).
SITE_OPTIONS: dict[str, tuple[str, bool, str]] = {
    "--site": ("NAME|PATH", False, "site profile (default: auto)"),
    "--keep-env": (
        "PATTERN",
        True,
        "host variable (fnmatch pattern; several comma-separated) to keep in the training "
        "environment",
    ),
}


def add_site_options(parser: argparse.ArgumentParser | Any) -> None:
    """``--site``, ``--keep-env``, and for the commands that join the ranks ``--backend``
    and ``--timeout``."""
    from ddpimg.runtime.defaults import DEFAULT_TIMEOUT_S

    for option, (metavar, repeatable, help_text) in SITE_OPTIONS.items():
        if repeatable:
            parser.add_argument(
                option, action="append", default=[], metavar=metavar, help=help_text
            )
        else:
            parser.add_argument(option, metavar=metavar, help=help_text)
    parser.add_argument(
        "--backend",
        default="",  # not a choice: "" is the profile's backend, else nccl on GPU, gloo on CPU
        choices=["nccl", "gloo"],
        help="default: the site's, else nccl on GPU, gloo on CPU",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"rendezvous and collective timeout (default {DEFAULT_TIMEOUT_S:g})",
    )


def positive_seconds(text: str) -> float:
    """``--timeout``'s value: a finite number of seconds above 0 (0 or less would make every
    collective fail at once, inf or nan never)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def add_local_rank_argument(parser: argparse.ArgumentParser | Any) -> None:
    """``--local-rank N`` / ``--local-rank=N`` / ``--local_rank=N``: accepted, and checked
    against the local rank resolved from the launcher's variables."""
    import argparse

    class RememberSpelling(argparse.Action):
        """Store the value and the spelling it came with (``local_rank_option``), so that
        ``train --script`` passes it on to the user's script the way the launcher wrote it."""

        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: str | Sequence[Any] | None,
            option_string: str | None = None,
        ) -> None:
            setattr(namespace, self.dest, values)
            namespace.local_rank_option = option_string

    parser.add_argument(
        *LOCAL_RANK_OPTIONS,
        dest="local_rank",
        type=int,
        default=None,
        metavar="N",
        action=RememberSpelling,
        help="the local rank as torch.distributed.launch or DeepSpeed's launcher pass it; "
        "must agree with LOCAL_RANK",
    )
    parser.set_defaults(local_rank_option=None)


def add_nproc_argument(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="start N local workers through torchrun's launcher API (laptops, CI, or one "
        "task per node under srun)",
    )


def local_workers(args: argparse.Namespace) -> int:
    """The workers ``--nproc-per-node`` asks for; 0 when it is not given. Fewer than one is
    an error: 0 would silently train in this process alone, and torch's launcher stops a
    negative count with an AssertionError."""
    nproc: int | None = args.nproc_per_node
    if nproc is None:
        return 0
    if nproc < 1:
        from ddpimg.errors import LauncherError

        raise LauncherError(
            f"--nproc-per-node {nproc}: the number of local workers must be at least 1",
            hint="--nproc-per-node N with N >= 1 (one per GPU of the node), or leave it out "
            "to run this process alone",
        )
    return nproc


def plan_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> LaunchPlan:
    """The launch plan of ``env`` under the options every command shares (``--site``,
    ``--keep-env``, ``--local-rank``)."""
    from ddpimg.plan import build_plan, short_hostname

    return build_plan(
        env,
        short_hostname(),
        site=args.site,
        keep=tuple(args.keep_env),
        local_rank=args.local_rank,
    )
