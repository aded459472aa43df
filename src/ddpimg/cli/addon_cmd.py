"""``ddpimg addon``: your own packages beside the image, never in it (docs/addons.md).

    ddpimg addon build -r requirements.txt     # in the image: NAME.addon.sqsh + NAME.lock
    ddpimg addon build --lock timm.lock        # exactly that lock again
    ddpimg addon build -r requirements.txt --image ddpimg:cpu   # from the host, in the image
    ddpimg addon image timm.addon.sqsh --tag ddpimg:cpu-timm    # Docker, podman: one more layer
    ddpimg addon check                         # the add-ons mounted here, and whether they fit
    ddpimg addon install-hook                  # a venv of your own sees mounted add-ons

``build`` runs with the image's own Python (``docker run ... ddpimg:cpu ddpimg addon build``,
``apptainer exec ddp.sif ddpimg addon build``), or from the host with ``--image``, which runs
it there through the local engine with your pip settings. A job mounts the add-on with
``ddpimg sbatch --addon FILE`` (or ``ddpimg submit --addon FILE``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpimg import exitcodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="addon_command", required=True, metavar="SUBCOMMAND")
    build = sub.add_parser(
        "build",
        help="lock and pack requirements as an add-on for this image",
        description="Lock a requirements file against the image's own packages and pack it "
        "as NAME.addon.sqsh, with NAME.lock beside it.",
        allow_abbrev=False,
    )
    source = build.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "-r", "--requirements", type=Path, metavar="FILE", help="the packages to add, as pip "
        "takes them (names and versions; -r includes)"
    )  # fmt: skip
    source.add_argument(
        "--lock", type=Path, metavar="NAME.lock",
        help="build exactly this lock again (no resolution): the file you commit",
    )  # fmt: skip
    build.add_argument(
        "-o", "--output", type=Path, metavar="NAME.addon.sqsh",
        help="where the add-on goes (default: ./NAME.addon.sqsh; the lock goes beside it)",
    )  # fmt: skip
    build.add_argument(
        "--name",
        help="the add-on's name, its directory under /opt/ddpimg/addons (default: from -o, "
        "the lock, or the requirements file's name)",
    )
    build.add_argument(
        "--find-links", action="append", default=[], metavar="DIR",
        help="also look for packages in this directory of wheels and source distributions "
        "(repeat)",
    )  # fmt: skip
    build.add_argument(
        "--no-index",
        action="store_true",
        help="look nowhere else (an offline cluster: --find-links DIR --no-index)",
    )
    engine = build.add_argument_group("from the host: run the build in the image")
    engine.add_argument(
        "--image",
        metavar="IMAGE",
        help="the image to build in: a tag (docker, podman, podman-hpc) or a .sif file "
        "(apptainer, singularity); your pip settings and files are passed in",
    )
    engine.add_argument(
        "--engine",
        choices=("docker", "podman", "podman-hpc", "apptainer", "singularity"),
        help="the engine that runs --image (default: apptainer or singularity for a .sif, "
        "else docker, else podman)",
    )
    engine.add_argument(
        "--ddpimg-from",
        metavar="DIR",
        help="ddpimg installed for --image, a site's own image (the venv `ddpimg sbatch "
        "--ddpimg-from` takes): DIR/bin/ddpimg runs the build there",
    )
    image = sub.add_parser(
        "image",
        help="Docker / podman: the image plus add-ons, one layer each",
        description="Build a Docker or podman image from the base image and the add-ons, "
        "each unpacked at /opt/ddpimg/addons/NAME in a layer of its own.",
        allow_abbrev=False,
    )
    image.add_argument("addons", nargs="+", type=Path, metavar="FILE", help="NAME.addon.sqsh")
    image.add_argument(
        "--base", default="ddpimg:cpu", metavar="IMAGE",
        help="the image the add-ons were built in (default: ddpimg:cpu)",
    )  # fmt: skip
    image.add_argument(
        "--tag", metavar="TAG", help="the new image's tag (default: BASE-NAME[-NAME...])"
    )
    image.add_argument(
        "--engine", choices=("docker", "podman"), help="default: docker, else podman"
    )
    sub.add_parser(
        "check",
        help="list the add-ons mounted here and check each fits this image (exit 2 if not)",
        description="List the add-ons mounted under /opt/ddpimg/addons (or "
        "$DDPIMG_ADDON_ROOT) and check them as train does at start: made for this image's "
        "package set, readable, no package twice.",
        allow_abbrev=False,
    )
    hook = sub.add_parser(
        "install-hook",
        help="make this Python environment see mounted add-ons (ddpimg's images have it)",
        description="Write the start-up hook (a .pth file and its module) into this "
        "interpreter's site-packages, so that add-ons mounted under /opt/ddpimg/addons (or "
        "$DDPIMG_ADDON_ROOT) come after its own packages.",
        allow_abbrev=False,
    )
    hook.add_argument("--target", metavar="DIR", help="the site-packages directory to write to")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.addon_command == "build":
        return _build(args)
    if args.addon_command == "image":
        from ddpimg.addon.layered import build_image

        tag = build_image(args.addons, args.base, args.tag, args.engine)
        print(tag, flush=True)
        return exitcodes.OK
    if args.addon_command == "check":
        import os

        from ddpimg.addon.mounted import check_addons, explain_lines

        for line in explain_lines(os.environ) or ["no add-on is mounted here"]:
            print(line)
        check_addons(os.environ)
        return exitcodes.OK
    from ddpimg.addon.sitepath import install_hook

    for path in install_hook(args.target):
        print(path)
    return exitcodes.OK


def _build(args: argparse.Namespace) -> int:
    given = [flag for flag, value in (("--engine", args.engine),
                                      ("--ddpimg-from", args.ddpimg_from)) if value]  # fmt: skip
    if given and not args.image:
        from ddpimg.addon.errors import AddonError

        raise AddonError(
            f"{' and '.join(given)} {'say' if len(given) > 1 else 'says'} how to run --image, "
            "which is not given",
            hint="add --image IMAGE (the image to build in), or drop them to build here",
        )
    if args.image:
        from ddpimg.addon.engine import build_in_image

        return build_in_image(args)
    from ddpimg.addon.build import BuildRequest, build

    built = build(
        BuildRequest(
            requirements=args.requirements,
            lock=args.lock,
            name=args.name,
            output=args.output,
            find_links=tuple(args.find_links),
            no_index=args.no_index,
        )
    )
    sys.stdout.write("".join(f"{line}\n" for line in built.summary()))
    return exitcodes.OK
