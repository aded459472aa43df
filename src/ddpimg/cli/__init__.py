"""Command line: ``ddpimg env|train|doctor|sbatch|plot|data|export|sync|site|runs|addon``, the
laptop's ``ddpimg submit|follow|fetch|cancel``, and ``train`` (== ``ddpimg train``).

Each command is a chain of small steps (build parser -> parse -> run); only ``run`` touches
the process. Only the module of the command being run is imported: ``ddpimg env`` runs at
every job start on every rank, so it must not pay for the trainer's or the plotter's imports,
and it never imports torch. For the same reason ``ddpimg env`` parses its plain argument lists
without argparse (``env_cmd.parse_plain``), whose own start-up costs more than the rest of
``ddpimg env``; argparse parses everything else and reports every usage error.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    import argparse

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError, report
from ddpimg.optional import missing_package
from ddpimg.version import __version__


class CommandModule(Protocol):
    """What every ``ddpimg.cli.<name>_cmd`` module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, argv: list[str]) -> int: ...


# name -> (one-line help, module implementing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "env": ("print the resolved topology, site and environment (no torch)", "env_cmd"),
    "train": ("run a bundled trainer or your own script", "train_cmd"),
    "doctor": ("check ranks, devices, network and all-reduce on every rank", "doctor_cmd"),
    "sbatch": (
        "render (and submit) a Slurm batch script for a site, an image and a train command",
        "sbatch_cmd",
    ),
    "plot": ("plot a run's loss, learning rate and throughput; several overlaid", "plot_cmd"),
    "data": (
        "prepare datasets: pack an image tree into shards, index a dataset, tokenize text",
        "data_cmd",
    ),
    "export": (
        "write a train gpt checkpoint as a Hugging Face GPT-2 model directory",
        "export_cmd",
    ),
    "sync": (
        "upload the W&B and MLflow runs train --log-to wrote offline (on a login node)",
        "sync_cmd",
    ),
    "site": ("draft a site profile for this cluster: ddpimg site probe", "site_cmd"),
    "runs": (
        "list the runs in ./runs (or $DDPIMG_RUNS) and those submitted from here",
        "runs_cmd",
    ),
    "addon": (
        "your own packages beside the image: build an add-on, or an image with add-ons",
        "addon_cmd",
    ),
    "submit": (
        "from a laptop: stage this tree, render and submit the job on a login node over ssh",
        "submit_cmd",
    ),
    "follow": ("follow a submitted run: its job's state, live metrics, verdict", "follow_cmd"),
    "fetch": ("bring a submitted run's files back into ./runs/NAME", "fetch_cmd"),
    "cancel": ("cancel a submitted run's job", "cancel_cmd"),
}


def command_module(name: str) -> CommandModule:
    return cast(CommandModule, importlib.import_module(f"ddpimg.cli.{COMMANDS[name][1]}"))


def build_parser(
    selected: str | None = None, command_prog: str | None = None
) -> argparse.ArgumentParser:
    """The parser; only ``selected``'s options are added (all of them when None), so that
    running one command does not import the others. ``command_prog``: the name ``selected``
    was started by (its usage and errors say ``train``, not ``ddpimg train``)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="ddpimg",
        description="Resolve ranks and the site, then train the same way on any cluster.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"ddpimg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, _) in COMMANDS.items():
        command_parser = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            allow_abbrev=False,
            prog=command_prog if name == selected else None,  # None: "ddpimg NAME"
        )
        if selected in (None, name):
            command_module(name).add_arguments(command_parser)
    return parser


def parse_args(
    selected: str | None, args: list[str], command_prog: str | None = None
) -> argparse.Namespace:
    """``args`` parsed; ``selected`` is the command named first, if any."""
    if selected == "env":
        from ddpimg.cli import env_cmd

        plain = env_cmd.parse_plain(args[1:])
        if plain is not None:
            return plain
    return build_parser(selected, command_prog).parse_args(args)


def report_error(err: DdpimgError) -> int:
    """Print ``err`` the one way user errors are printed; return its exit status."""
    return exitcodes.tell(err)


def report_crash(command: str, err: Exception) -> int:
    """Anything that is not a user error: one line naming the command, the exception and
    the file its whole traceback went to (a bare traceback on every rank buries the first
    line that says what went wrong); exit status 1."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(err))
    try:
        descriptor, path = tempfile.mkstemp(prefix="ddpimg-traceback-", suffix=".txt")
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(f"{command}\n{text}")
        where = f"the full traceback is in {path}"
    except OSError as write_error:
        where = f"its traceback could not be written ({write_error.strerror}):\n{text}"
    report(
        f"{command} failed with {type(err).__name__}: {err}; {where}",
        hint="an error ddpimg does not foresee (a bug, or a library's): report it with that "
        "file and the command line",
    )
    return exitcodes.TRAINING_FAILED


def main(argv: Sequence[str] | None = None, command_prog: str | None = None) -> int:
    """``ddpimg ARGS``; ``command_prog`` names the console script that stands for the
    command (``train``). A user error is exit status 2 and one ``ddpimg: error:`` line;
    anything else is exit status 1 and one line (``report_crash``), never a bare
    traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    selected = args[0] if args and args[0] in COMMANDS else None
    namespace = parse_args(selected, args, command_prog)
    try:
        return command_module(namespace.command).run(namespace, args)
    except DdpimgError as err:
        return report_error(err)
    except ModuleNotFoundError as err:
        missing = missing_package(err)
        if missing is None:
            return report_crash(_command_line(namespace.command, command_prog), err)
        return report_error(missing)
    except BrokenPipeError as err:
        if not _stdout_closed():
            return report_crash(_command_line(namespace.command, command_prog), err)
        return exitcodes.OUTPUT_CLOSED
    except Exception as err:
        return report_crash(_command_line(namespace.command, command_prog), err)
    except KeyboardInterrupt:
        # Ctrl-C: one line and the documented status, not a traceback per rank; a second
        # Ctrl-C while this process ends changes nothing.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(
            f"ddpimg: interrupted (Ctrl-C); exit status {exitcodes.INTERRUPTED}",
            file=sys.stderr,
            flush=True,
        )
        return exitcodes.INTERRUPTED


def _stdout_closed() -> bool:
    """Whether standard output's reader went away (``ddpimg runs | head``): then, as any
    Unix filter, end quietly with 128 + SIGPIPE. A write to such a pipe fails with EPIPE and
    ``poll`` reports an error on it. Standard output then points at /dev/null, so that the
    interpreter's last flush of what is still buffered does not fail again (Python's
    documentation, the note on SIGPIPE in the signal module)."""
    import select
    import stat

    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(select, "poll"):
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError):
        return False
    if not any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


def _command_line(command: str, command_prog: str | None) -> str:
    return command_prog if command_prog == command else f"ddpimg {command}"


def train_main() -> int:
    """The ``train`` command: ``ddpimg train`` with the same arguments."""
    return main(["train", *sys.argv[1:]], command_prog="train")
