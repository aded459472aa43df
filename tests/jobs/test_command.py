"""The training command: its kind, its options, and what ddpimg adds to it."""

from __future__ import annotations

import shlex

import pytest

from ddpimg.jobs.command import TrainCommand, shell_words


@pytest.mark.parametrize(
    ("words", "kind"),
    [
        (["train"], "train"),
        (["/opt/venv/bin/train", "mnist"], "train"),
        (["ddpimg", "train", "toy"], "train"),
        (["ddpimg", "doctor"], "doctor"),
        (["ddpimg", "env"], "other"),
        (["ddpimg"], "other"),
        (["torchrun", "--nproc-per-node", "4", "-m", "ddpimg", "train"], "launcher"),
        (["deepspeed", "train.py"], "launcher"),
        (["mpirun", "-np", "4", "train"], "launcher"),
        (["python", "-m", "torch.distributed.run", "train.py"], "launcher"),
        (["python3", "-m", "deepspeed", "train.py"], "launcher"),
        (["python", "my_ddp.py"], "other"),
        ([], "other"),
    ],
)
def test_kind(words: list[str], kind: str) -> None:
    assert TrainCommand(tuple(words)).kind == kind


@pytest.mark.parametrize(
    ("words", "name"),
    [
        (["torchrun", "x.py"], "torchrun"),
        (["/usr/bin/mpirun", "x"], "mpirun"),
        (["python", "-m", "torch.distributed.run", "x.py"], "python -m torch.distributed.run"),
    ],
)
def test_launcher_name(words: list[str], name: str) -> None:
    assert TrainCommand(tuple(words)).launcher_name == name


@pytest.mark.parametrize(
    ("words", "name", "value"),
    [
        (["train", "--out", "runs/a"], "--out", "runs/a"),
        (["train", "--out=runs/b"], "--out", "runs/b"),
        (["train", "--out"], "--out", ""),
        (["train", "--outdir", "x"], "--out", None),  # a longer option is another option
        (["train"], "--resume", None),
        (["train", "--script", "f.py", "--resume", "x"], "--resume", None),  # the script's own
    ],
)
def test_option(words: list[str], name: str, value: str | None) -> None:
    assert TrainCommand(tuple(words)).option(name) == value


def added(words: list[str], site: str = "puhti", launch: str = "srun", workers: int = 4) -> str:
    return " ".join(shell_words(TrainCommand(tuple(words)), site, launch, workers))


@pytest.mark.parametrize(
    ("words", "launch", "expected"),
    [
        (
            ["train", "mnist"],
            "srun",
            'train mnist --site puhti --out "runs/${SLURM_JOB_ID}" --resume auto',
        ),
        (["train", "--out", "r", "--resume", "none"], "srun", "train --out r --resume none "
         "--site puhti"),
        (["train", "--site=della", "--out=r", "--resume=auto"], "srun",
         "train --site=della --out=r --resume=auto"),
        (
            ["train", "--epochs", "1"],
            "torchrun",
            'train --epochs 1 --site puhti --out "runs/${SLURM_JOB_ID}" --resume auto '
            "--nproc-per-node 4",
        ),
        (["train", "--nproc-per-node", "4", "--out", "r", "--resume", "auto"], "torchrun",
         "train --nproc-per-node 4 --out r --resume auto --site puhti"),
        (
            ["train", "--script", "my.py", "--out", "x"],
            "srun",
            "train --site puhti --script my.py --out x",  # the script's own --out
        ),
        (["ddpimg", "doctor"], "srun", "ddpimg doctor --site puhti"),
        (["python", "my.py", "--lr", "0.1"], "srun", "python my.py --lr 0.1"),
    ],
)  # fmt: skip
def test_added_options(words: list[str], launch: str, expected: str) -> None:
    assert added(words, launch=launch) == expected


def test_user_words_stay_literal() -> None:
    words = ["train", "--out", "my runs/$HOME", "--data", "it's"]
    rendered = added(words)
    assert shlex.split(rendered)[:5] == words  # what bash hands to train, unexpanded
    assert "'my runs/$HOME'" in rendered


def test_site_path_is_quoted() -> None:
    assert added(["ddpimg", "doctor"], site="my site.toml") == "ddpimg doctor --site 'my site.toml'"
