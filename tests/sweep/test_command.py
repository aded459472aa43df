"""A sweep's train command (ddpimg.sweep.command) with train's own parser: how each point
is spelled, and the refusals in the option's own words (ddpimg.cli.sweep_options)."""

from __future__ import annotations

import argparse

import pytest

from ddpimg.cli.sweep_options import plan_sweep, train_parser
from ddpimg.sweep.command import PointCommands, option_forms, split_command
from ddpimg.sweep.spec import SweepError, parse_sweep


def sweep_args(
    *texts: str, trials: int | None = None, seed: int | None = None
) -> argparse.Namespace:
    return argparse.Namespace(
        sweep=list(texts), trials=trials, sweep_seed=seed, max_points=1000, parallel=1
    )


def test_the_sweeps_own_options_and_out_are_cut_from_the_command() -> None:
    words = ["mnist", "--sweep", "lr=1,2", "--max-steps", "3", "--parallel=2", "--out", "d",
             "--trials", "4", "--script", "x.py", "--sweep", "kept"]  # fmt: skip
    command = split_command(words)
    assert command.options == ("mnist", "--max-steps", "3")
    assert command.out == "d"
    assert command.script == ("--script", "x.py", "--sweep", "kept")
    assert split_command(["--out=a/b", "--lr", "1"]).out == "a/b"


def test_options_flags_and_their_no_forms() -> None:
    forms = option_forms(train_parser())
    assert forms["lr"].words("0.5") == ["--lr=0.5"]
    assert forms["seed"].words("-1") == ["--seed=-1"]  # a value may start with a dash
    assert forms["deterministic"].words("true") == ["--deterministic"]
    assert forms["deterministic"].words("false") == []
    assert forms["sync-batchnorm"].words("false") == ["--no-sync-batchnorm"]
    assert forms["sync-batchnorm"].words("TRUE") == ["--sync-batchnorm"]
    assert not {"script", "keep-env", "help"} & set(forms)


def test_a_point_overrides_the_commands_value_and_gets_its_own_out() -> None:
    plan = plan_sweep(
        sweep_args("lr=0.5,0.25", "deterministic=true,false"),
        ["mnist", "--lr", "0.1", "--max-steps", "3", "--out", "sweeps/a"],
        {},
        in_job=False,
    )
    assert plan.directory == "sweeps/a"
    words = [plan.commands.words(point, f"sweeps/a/{point.name}") for point in plan.points]
    assert words[0] == [
        "mnist", "--lr", "0.1", "--max-steps", "3", "--lr=0.5", "--deterministic",
        "--out", "sweeps/a/lr=0.5_deterministic=true",
    ]  # fmt: skip
    assert words[1][-3:] == ["--lr=0.5", "--out", "sweeps/a/lr=0.5_deterministic=false"]
    # The last --lr wins, as train reads it.
    assert train_parser().parse_args(words[0]).lr == 0.5


def test_a_scripts_placeholders_take_the_points_values() -> None:
    plan = plan_sweep(
        sweep_args("lr=0.1,0.01", "opt=adam"),
        ["--nproc-per-node", "2", "--script", "train.py", "--lr={lr}", "{opt}", "{other}"],
        {"DDPIMG_RUNS": "/scratch/runs"},
        in_job=False,
    )
    assert plan.directory.startswith("/scratch/runs/train-lr-opt-")
    first = plan.points[0]
    assert plan.commands.option_words(first) == []
    assert plan.commands.words(first, "o") == [
        "--nproc-per-node", "2", "--out", "o", "--script", "train.py", "--lr=0.1", "adam",
        "{other}",
    ]  # fmt: skip


def test_a_name_a_script_does_not_hold_is_refused() -> None:
    with pytest.raises(SweepError) as caught:
        plan_sweep(sweep_args("lr=1,2"), ["--script", "t.py", "--rate", "{rate}"], {}, in_job=False)
    assert caught.value.message == (
        "--sweep lr: train --script takes a sweep's values in the script's arguments, and they "
        "hold no {lr} (placeholders found: {rate})"
    )
    assert caught.value.hint == "write {lr} where the value goes: train --script train.py --lr {lr}"


@pytest.mark.parametrize(
    ("texts", "message", "hint"),
    [
        (["lrr=1,2"], "--sweep lrr: train has no option --lrr", "did you mean --lr?"),
        (["out=a,b"], "--sweep out: --out is not swept: each point writes", None),
        (["resume=none"], "--sweep resume: --resume is not swept", None),
        (["parallel=1,2"], "--sweep parallel: --parallel is not swept", None),
        (["compile=yes"], "--sweep compile: --compile is a flag, and 'yes' is not true or false",
         "--sweep compile=true,false"),
        (["lr=0.1,abc"], "--sweep: the point lr=abc is refused: argument --lr: invalid float "
         "value: 'abc'", "train --help"),
        (["strategy=ddp,nope"], "--sweep: the point strategy=nope is refused: argument --strategy: "
         "invalid choice: 'nope'", None),
        (["zero-stage=1"], "--sweep: the point zero-stage=1 is refused: --zero-stage 1 applies to "
         "--strategy deepspeed only", None),
        (["size=tiny"], "--sweep: the point size=tiny is refused: --size applies to the gpt "
         "trainer only",
         "train gpt"),
    ],
)  # fmt: skip
def test_refused_before_anything_starts_with_the_options_own_words(
    texts: list[str], message: str, hint: str | None
) -> None:
    with pytest.raises(SweepError) as caught:
        plan_sweep(sweep_args(*texts), ["mnist", "--max-steps", "3"], {}, in_job=False)
    assert caught.value.message.startswith(message), caught.value.message
    if hint is not None:
        assert hint in (caught.value.hint or "")


def test_a_command_train_refuses_is_refused_as_such() -> None:
    with pytest.raises(SweepError, match="the train command is refused: unrecognized arguments"):
        plan_sweep(sweep_args("lr=1"), ["--no-such-option"], {}, in_job=False)


def test_in_a_job_the_sweep_belongs_to_sbatch_and_trackers_are_not_checked() -> None:
    with pytest.raises(SweepError, match="--sweep is given to train inside the job"):
        plan_sweep(sweep_args("lr=1,2"), ["--sweep", "seed=1,2"], {}, in_job=True)
    # wandb may be missing where the job is rendered; the image has it.
    plan = plan_sweep(sweep_args("lr=1,2"), ["--log-to", "wandb"], {}, in_job=True)
    assert plan.directory == f"runs/{plan.name}"


def test_point_commands_need_a_form_for_every_option() -> None:
    sweep = parse_sweep(["lr=1"])
    commands = PointCommands(split_command(["mnist"]), sweep, option_forms(train_parser()))
    assert commands.tail(sweep.points()[0], "x") == ["--lr=1", "--out", "x"]
