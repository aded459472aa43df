"""Make the folder of wheels the lent GPU machine lacks, and prove the list complete
(``nox -s device-wheels``; the recipe is benchmarks/runbook/wheels.py's docstring).

    python benchmarks/device_wheels.py [--out .whl] [--check-only]

``--check-only`` builds and downloads nothing: it proves the folder as it is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from runbook import wheels


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=wheels.REPO / ".whl", help="the folder")
    parser.add_argument("--check-only", action="store_true", help="prove the folder as it is")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    device = wheels.read_device_packages()
    requirements = wheels.stack_requirements(device)
    pip = wheels.pip_command()
    try:
        if not ns.check_only:
            carried = wheels.collect(requirements, device, wheels.read_lock(), ns.out, pip)
            for name, wheel in sorted(carried.wheels.items()):
                print(f"carry {wheel.name}: {carried.reasons[name]}")
            for removed in wheels.prune(ns.out, carried.wheels.values()):
                print(f"removed {removed}: nothing needs it any more")
        with tempfile.TemporaryDirectory(prefix="ddpimg-wheel-proof-") as work:
            proof = wheels.prove(
                requirements, ns.out, device, Path(work), pip, lock=wheels.read_lock()
            )
    except wheels.WheelError as err:
        print(f"device_wheels: error: {err}", file=sys.stderr)
        return 1
    print(f"resolved for Python {wheels.PYTHON_VERSION} with no index: {', '.join(requirements)}")
    print("from the folder: " + ", ".join(f"{n} {v}" for n, v in sorted(proof.carried.items())))
    print("from the device: " + ", ".join(f"{n} {v}" for n, v in sorted(proof.device.items())))
    for spare in proof.insurance:
        print(f"insurance, used only if the device's own is too old: {spare}")
    for assumption in proof.assumptions:
        print(f"assumed (the device's version was not read): {assumption}")
    carried_mib = wheels.folder_bytes(ns.out) / 2**20
    tree_mib = wheels.tree_bytes() / 2**20
    limit_mib = wheels.CARRY_LIMIT_BYTES / 2**20
    print(
        f"size: wheels {carried_mib:.1f} MiB + working tree {tree_mib:.1f} MiB = "
        f"{carried_mib + tree_mib:.1f} of {limit_mib:.0f} MiB"
    )
    failed = False
    if proof.unused:
        print(f"device_wheels: error: not used by the resolution: {', '.join(proof.unused)}")
        failed = True
    if carried_mib + tree_mib > limit_mib:
        print("device_wheels: error: over the device tool's limit", file=sys.stderr)
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
