"""Trajectory tolerances, measured: a configuration's rounding-noise floor, and the multiple of
it that a comparison of two trajectories of that configuration may differ by.

Two runs that compute the same sums in another order (1 and 2 processes, 1 and 2 intra-op
threads, another CPU's kernels) give losses that differ by rounding, and training amplifies
that difference step after step: hardly at all for the small models here, 20-30x a step for
resnet18 from scratch. A fixed tolerance therefore passes on one machine and fails on the
next. Instead, for each configuration, ``python -m tests.noise -- TRAIN ARGUMENTS`` runs
``train`` with those arguments as one process (the reference: 2 intra-op threads), as one
process in each variant (1 thread; torch's default kernels instead of AVX2; oneDNN limited to
SSE4.1; MKL's conditional-reproducibility path: the last three stand for another CPU), and
as 2 ranks, natively and on each other kernel set; it prints each run's relative difference
from the one process it compares with, step by step. From those:

- the **floor** is the largest difference at steps 1-2 of the runs that only reorder sums,
  never less than one float32 rounding step (FLOAT32_STEP; FLOAT64_STEP in float64);
- the **multiple** is 10x the largest difference, in floors, reached over the steps compared
  by the comparisons a test makes on one machine (2 ranks against 1 process, natively or on
  other kernels; 1 thread), rounded up to 1, 2 or 5 times a power of ten; most tolerances
  also cover the kernel variants' own growth (two kernel sets against each other, which no
  test compares: more than needed), and each says which it covers. A test compares only
  steps where that keeps the tolerance far below what a real difference makes (another
  batch, per-rank statistics: percents); a test whose point is the data order rather than
  the arithmetic gets that range from a smaller learning rate or float64.

Each test's docstring or constant gives its figures (the machine: a 2-core AMD EPYC, AVX2).
Bitwise claims (same world size, ``--deterministic``) are compared with ``==``, not here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# One rounding step of a float32 value, relative (2**-23): two losses closer than this are
# the same number. The floor of a float32 run is never taken below it; of a float64 one
# (where a test trains in float64), never below FLOAT64_STEP.
FLOAT32_STEP = 2.0**-23
FLOAT64_STEP = 2.0**-52
FLOOR_STEPS = 2


@dataclass(frozen=True)
class Tolerance:
    """What two trajectories of one configuration may differ by: ``multiple`` times its
    measured noise ``floor`` (relative), over their first ``steps`` steps."""

    floor: float
    multiple: float
    steps: int

    def __post_init__(self) -> None:
        if self.floor < FLOAT64_STEP or self.multiple < 1 or self.steps < 1:
            raise ValueError(f"not a measured tolerance: {self}")

    @property
    def rel(self) -> float:
        return self.floor * self.multiple


def relative_differences(actual: Sequence[float], expected: Sequence[float]) -> list[float]:
    """Step by step, ``|actual - expected| / |expected|`` (inf where one is not finite)."""
    found = []
    for a, e in zip(actual, expected, strict=True):
        if not (math.isfinite(a) and math.isfinite(e)):
            found.append(0.0 if a == e else math.inf)
        else:
            found.append(abs(a - e) / max(abs(e), sys.float_info.min))
    return found


def floor_between(
    reference: Sequence[float], reordered: Sequence[float], least: float = FLOAT32_STEP
) -> float:
    """The noise floor measured inside a test: the largest difference at steps
    1..FLOOR_STEPS between two runs that only sum in another order (e.g. one intra-op thread
    against two), never below ``least`` (one rounding step of the dtype trained in)."""
    early = relative_differences(reordered[:FLOOR_STEPS], reference[:FLOOR_STEPS])
    return max([least, *early])


def assert_within(
    actual: Sequence[float], expected: Sequence[float], tolerance: Tolerance, what: str
) -> None:
    """``actual`` has ``expected``'s length and agrees with it within ``tolerance`` over its
    first ``tolerance.steps`` steps (the steps after those are not compared: there the
    dynamics amplify rounding beyond the multiple)."""
    assert len(actual) == len(expected), f"{what}: {len(actual)} steps vs {len(expected)}"
    steps = min(tolerance.steps, len(expected))
    differences = relative_differences(actual[:steps], expected[:steps])
    compared = zip(actual[:steps], expected[:steps], differences, strict=True)
    for step, (a, e, rel) in enumerate(compared, start=1):
        assert rel <= tolerance.rel, (
            f"{what}: step {step}: {a!r} vs {e!r}: relative difference {rel:.1e} > "
            f"{tolerance.rel:.1e} ({tolerance.multiple:g} x this configuration's noise floor "
            f"{tolerance.floor:.1e}, steps 1-{steps}; see tests/noise.py)"
        )


# ---- Measuring a configuration: python -m tests.noise -- TRAIN ARGUMENTS -------------------

# Each variant: the environment that changes the order of the sums, on top of the reference's
# (one process, 2 intra-op threads, torch's best kernels for this CPU).
VARIANTS: dict[str, dict[str, str]] = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "aten default": {"ATEN_CPU_CAPABILITY": "default"},
    "onednn sse4.1": {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    "mkl compatible": {"MKL_CBWR": "COMPATIBLE"},
}
REFERENCE_ENV = {"OMP_NUM_THREADS": "2"}
# The variants that stand for another CPU's kernels: on each, every comparison is also made
# against one process on the same kernels (what a test does on such a machine).
KERNELS = ("aten default", "onednn sse4.1", "mkl compatible")
ON = " on "


def floor_of(differences: Mapping[str, Sequence[float]]) -> float:
    """The noise floor: the largest difference at steps 1..FLOOR_STEPS of the runs that only
    reorder sums: the variants, and 2 ranks on other kernels (``differences``: name ->
    per-step relative difference)."""
    early = [rel for name, rels in differences.items() if name in VARIANTS or ON in name
             for rel in rels[:FLOOR_STEPS]]  # fmt: skip
    return max([FLOAT32_STEP, *early])


def _train(arguments: Sequence[str], out: Path, env: Mapping[str, str], ranks: int) -> list[float]:
    from tests.integration.runs import command, run, train_losses

    # The launch first: a comparison's own --nproc-per-node, later, is the one train keeps.
    launch = ["--nproc-per-node", str(ranks)] if ranks > 1 else []
    run([command("train"), *launch, *arguments, "--out", str(out)], env, timeout=3600)
    return train_losses(out)


def measure(
    arguments: Sequence[str], comparisons: Mapping[str, Sequence[str]], work: Path
) -> dict[str, list[float]]:
    """The losses of the reference run (``reference``), of each variant, and of each of
    ``comparisons`` (name -> extra arguments of a 2-rank run; a ``--nproc-per-node`` among
    them sets another number of ranks), natively and on each of KERNELS."""
    reordering = {name for env in VARIANTS.values() for name in env}
    base = {k: v for k, v in os.environ.items() if k not in reordering} | {"PYTHONUNBUFFERED": "1"}
    losses = {"reference": _train(arguments, work / "reference", base | REFERENCE_ENV, 1)}
    for index, (name, env) in enumerate(VARIANTS.items()):
        losses[name] = _train(arguments, work / f"variant-{index}", base | REFERENCE_ENV | env, 1)
    for index, (name, extra) in enumerate(comparisons.items()):
        losses[name] = _train([*arguments, *extra], work / f"ranks-{index}", base, 2)
    for index, name in enumerate(KERNELS):
        env = base | VARIANTS[name]
        for number, (compared, extra) in enumerate(comparisons.items()):
            out = work / f"kernels-{index}-{number}"
            losses[f"{compared}{ON}{name}"] = _train([*arguments, *extra], out, env, 2)
    return losses


def reference_of(name: str) -> str:
    """What a run is compared with: the reference, or a kernel variant's own one process."""
    return name.split(ON, 1)[1] if ON in name else "reference"


def report(losses: Mapping[str, Sequence[float]]) -> str:
    """Each run's per-step relative difference from the reference (a 2-rank run on other
    kernels: from one process on those), the floor and the most."""
    differences = {name: relative_differences(found, losses[reference_of(name)])
                   for name, found in losses.items() if name != "reference"}  # fmt: skip
    names = list(differences)
    lines = ["| step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for step in range(len(losses["reference"])):
        cells = [f"{differences[name][step]:.1e}" for name in names]
        lines.append(f"| {step + 1} | " + " | ".join(cells) + " |")
    floor = floor_of(differences)
    for name, rels in differences.items():
        lines.append(f"{name}: largest {max(rels):.1e} = {max(rels) / floor:.3g} x the floor; "
                     f"by step: " + " ".join(f"{rel / floor:.3g}" for rel in rels))  # fmt: skip
    lines.append(f"floor (steps 1-{FLOOR_STEPS} of the reordering variants): {floor:.2e}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.noise", description="measure a configuration's noise floor"
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="a 2-rank run with these extra train arguments (default: one, '2 ranks=')",
    )
    parser.add_argument("--json", type=Path, help="also write every run's losses here")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="-- TRAIN ARGUMENTS")
    ns = parser.parse_args(argv)
    arguments = ns.arguments[1:] if ns.arguments[:1] == ["--"] else ns.arguments
    if not arguments:
        parser.error("give the train arguments after --")
    comparisons = {}
    for spec in ns.compare or ["2 ranks="]:
        name, _, extra = spec.partition("=")
        comparisons[name] = extra.split()
    with tempfile.TemporaryDirectory(prefix="ddpimg-noise-") as work:
        losses = measure(arguments, comparisons, Path(work))
    if ns.json:
        ns.json.write_text(json.dumps(losses, indent=1))
    print(report(losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
