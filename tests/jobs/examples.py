"""The example jobs of the golden files and of ``docs/sbatch-examples.md``: one 2-node job per
shipped site profile, and one per container runtime no shipped site uses, rendered through
the same code path as ``ddpimg sbatch``.

Regenerate both after an intended change to the renderer or a profile::

    DDPIMG_UPDATE_GOLDEN=1 python -m pytest tests/jobs -q

then read the diff: it is exactly what users' scripts will change by.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from tests.golden import UPDATE_VAR

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
DOC = REPO / "docs" / "sbatch-examples.md"
SHIPPED = sorted(path.stem for path in (REPO / "site-profiles").glob("*.toml"))

COMMON = ["--nodes", "2", "--time", "12:00:00"]
COMMAND = ["--", "train", "mnist", "--epochs", "5", "--global-batch-size", "256"]
# What a site needs beyond COMMON; each variation shows one feature of the renderer.
EXTRA: dict[str, list[str]] = {
    # The generic profile knows no GPU count, nor the CPUs a rank gets.
    "generic": ["--gpus-per-node", "4", "--cpus-per-task", "8"],
    # Docker, CPU only, on the one machine there is.
    "local": ["--nodes", "1", "--gpu-request", "none", "--gpus-per-node", "2"],
    # AMD GPUs: singularity --rocm, in LUMI's own PyTorch container with ddpimg beside it.
    "lumi": ["--ddpimg-from", "/project/project_465000000/ddpimg"],
    "palmetto": ["--launch", "torchrun"],  # the origin tutorial's one launcher per node
    # Retired: rendered for their archives only.
    "puhti": ["--allow-retired"],
    "mahti": ["--allow-retired"],
}
# Runtimes no shipped profile uses, each on the generic site.
RUNTIME_EXAMPLES: dict[str, list[str]] = {
    "runtime-pyxis": [
        "--site",
        "generic",
        "--gpus-per-node",
        "4",
        "--cpus-per-task",
        "8",
        "--runtime",
        "pyxis",
    ],
    "runtime-none": [
        "--site",
        "generic",
        "--gpus-per-node",
        "4",
        "--cpus-per-task",
        "8",
        "--runtime",
        "none",
    ],
}
# Where the training data comes from (ddpimg.jobs.data): a squashfs image mounted read-only,
# or shards copied to every node's own disk; train resnet gets --data from them.
DATA_COMMAND = ["--", "train", "resnet", "--epochs", "90", "--global-batch-size", "1024"]
DATA_EXAMPLES: dict[str, list[str]] = {
    "data-image": ["--site", "roihu", "--data-image", "/scratch/project_2001234/imagenet.sqsh"],
    "data-stage": ["--site", "della", "--stage-data", "/scratch/gpfs/me/imagenet-shards"],
}
# A node range (ddpimg.jobs.noderange): a job requeued after it lost a node starts again on
# the nodes that are left, with the same global batch.
# 384 is divisible by the ranks of 2, 3 and 4 nodes of 2 GPUs.
RANGE_EXAMPLES: dict[str, list[str]] = {
    "node-range": ["--site", "della", "--nodes", "2-4", "--time", "12:00:00", "--",
                   "train", "mnist", "--epochs", "5", "--global-batch-size", "384"],
}  # fmt: skip
# Add-ons (ddpimg.jobs.addons): mounted as a squashfs image where the runtime can (apptainer),
# unpacked on every node and bound where it cannot (pyxis).
ADDON_COMMAND = ["--", "train", "--script", "train.py", "--lr", "0.1"]
ADDON_EXAMPLES: dict[str, list[str]] = {
    "addon": ["--site", "roihu", "--addon", "/projappl/project_2001234/timm.addon.sqsh"],
    "addon-pyxis": ["--site", "generic", "--gpus-per-node", "4", "--cpus-per-task", "8",
                    "--runtime", "pyxis", "--addon", "timm.addon.sqsh"],
}  # fmt: skip
# A sweep (ddpimg.jobs.array): one array task a point, at most 2 at once, each point in its
# own run directory; a script's values go into its {NAME} placeholders.
SWEEP_EXAMPLES: dict[str, list[str]] = {
    "sweep": ["--site", "della", "--nodes", "1", "--time", "4:00:00", "--sweep", "lr=0.1,0.05",
              "--sweep", "seed=1,2", "--max-parallel", "2", "--",
              "train", "mnist", "--epochs", "5", "--global-batch-size", "256"],
    "sweep-script": ["--site", "roihu", "--nodes", "1", "--time", "1:00:00", "--sweep",
                     "lr=log:1e-4:1e-2", "--trials", "3", "--sweep-seed", "0", "--",
                     "train", "--script", "train.py", "--lr", "{lr}"],
}  # fmt: skip
EXAMPLES = [
    *SHIPPED,
    *RUNTIME_EXAMPLES,
    *DATA_EXAMPLES,
    *RANGE_EXAMPLES,
    *ADDON_EXAMPLES,
    *SWEEP_EXAMPLES,
]


# Shown in the docs; test_golden.py checks that it loads and renders.
JOB_FILE_EXAMPLE = """\
# job.toml: keys named like the flags; flags given with --config override them.
site = "roihu"
nodes = 2
time = "1-00:00:00"
account = "project_2001234"
image = "/projappl/project_2001234/ddp-arm64.sif"
binds = ["/scratch/project_2001234"]
max_restarts = 5
sbatch_options = ["--mail-type=END,FAIL"]
command = ["train", "mnist", "--epochs", "14", "--global-batch-size", "512"]
"""


def example_args(example: str) -> list[str]:
    """The `ddpimg sbatch` arguments of ``example``: a site's name or a key of the other
    examples' tables."""
    if example in RUNTIME_EXAMPLES:
        return [*RUNTIME_EXAMPLES[example], *COMMON, *COMMAND]
    if example in DATA_EXAMPLES:
        return [*DATA_EXAMPLES[example], *COMMON, *DATA_COMMAND]
    if example in RANGE_EXAMPLES:
        return RANGE_EXAMPLES[example]
    if example in ADDON_EXAMPLES:
        return [*ADDON_EXAMPLES[example], *COMMON, *ADDON_COMMAND]
    if example in SWEEP_EXAMPLES:
        return SWEEP_EXAMPLES[example]
    return ["--site", example, *COMMON, *EXTRA.get(example, []), *COMMAND]


def render_example(example: str) -> str:
    args = build_parser().parse_args(["sbatch", *example_args(example)])
    # An empty environment and a host name no profile matches: only --site decides.
    return prepare(args, {}, "example-host").script()


def examples_doc() -> str:
    parts = [
        "# `ddpimg sbatch` examples",
        "",
        "The batch script `ddpimg sbatch` renders for a 2-node job on every shipped site profile.",
        "This file is generated by the renderer itself (`tests/jobs/examples.py`; regenerate "
        f"with `{UPDATE_VAR}=1 python -m pytest tests/jobs`), and a test fails when it is out "
        "of date.",
        "See [Batch scripts](sbatch.md) for the options and `site-profiles/README.md` for "
        "the `[job]` defaults.",
        "",
    ]
    parts += [
        "A job file gives the same settings as TOML (`ddpimg sbatch --config job.toml`, "
        "`-o job.sh` or `--submit`):",
        "",
        "```toml",
        JOB_FILE_EXAMPLE.rstrip("\n"),
        "```",
        "",
        "Scripts by site, then for the runtimes no shipped site uses, then the two ways to "
        "bring a dataset to the nodes (a squashfs image, or staging to node-local disk), then "
        "a node range (a job requeued after it lost a node goes on with the nodes left), then "
        "an add-on of your own packages (mounted by Apptainer; unpacked on each node for "
        "pyxis), then sweeps (one array task a point):",
        "",
    ]
    parts += [f"- [{example}](#{example})" for example in EXAMPLES]
    for example in EXAMPLES:
        command = shlex.join(["ddpimg", "sbatch", *example_args(example)])
        parts += ["", f"## {example}", "", "```sh", command, "```", "", "```bash"]
        parts += [render_example(example).rstrip("\n"), "```"]
    return "\n".join(parts) + "\n"
