"""A sweep as one array job (ddpimg.jobs.array): the indices as #SBATCH --array takes them,
each task's point chosen by the batch shell and handed to train word for word, whatever the
values hold, and the points that completed left out of a second submit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from ddpimg.errors import DdpimgError
from ddpimg.jobs.array import array_spec
from tests.jobs.stubs import install_stubs, run_script
from tests.runs.test_records import make_run


@pytest.mark.parametrize(
    ("indices", "limit", "spec"),
    [([0, 1, 2, 3], None, "0-3"), ([0, 1, 2, 3], 2, "0-3%2"), ([1, 3, 5, 6, 7], None, "1,3,5-7"),
     ([4], 1, "4%1"), ([2, 0, 1], None, "0-2")],
)  # fmt: skip
def test_array_spec(indices: list[int], limit: int | None, spec: str) -> None:
    assert array_spec(indices, limit) == spec


SCRIPT_SWEEP = ["--site", "local", "--runtime", "none", "--gpu-request", "none", "--nodes", "1",
                "--gpus-per-node", "1", "--time", "10"]  # fmt: skip
HOSTILE = "$(touch pwned);'\"`x`"


def render(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(cwd)
    parsed = build_parser().parse_args(["sbatch", *SCRIPT_SWEEP, *args])
    return prepare(parsed, {}, "example-host").script()


def test_each_task_hands_its_point_to_train_word_for_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = render(
        ["--sweep", f"opt=adam,{HOSTILE}", "--", "train", "--script", "t.py", "--opt", "{opt}"],
        tmp_path,
        monkeypatch,
    )
    (tmp_path / "stubs").mkdir()
    stubs = install_stubs(tmp_path / "stubs")
    for task, value in (("0", "adam"), ("1", HOSTILE)):
        work = tmp_path / f"task-{task}"
        work.mkdir()
        ran = run_script(script, work, stubs, {"SLURM_ARRAY_TASK_ID": task})
        assert ran.returncode == 0, ran.stderr
        (train,) = [call for call in ran.calls if call.program == "train"]
        out = train.argv[train.argv.index("--out") + 1]
        assert out.startswith("runs/t-opt-")
        assert out.endswith("/opt=adam" if task == "0" else "/opt=__touch_pwned_____x_")
        assert train.argv[-3:] == ["t.py", "--opt", value]
        assert not (work / "pwned").exists()
    ran = run_script(script, tmp_path, stubs, {"SLURM_ARRAY_TASK_ID": "7"})
    assert ran.returncode == 2
    assert "ddpimg: array task 7 is not a point of sweep t-opt-" in ran.stderr


def test_points_that_completed_here_are_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--sweep", "seed=1,2,3", "--max-parallel", "2", "--", "train", "--max-steps", "3"]
    script = render(args, tmp_path, monkeypatch)
    assert "#SBATCH --array=0-2%2\n" in script
    (sweep,) = {line.split("/")[1] for line in script.splitlines() if "out=runs/" in line}
    make_run(tmp_path / "runs" / sweep / "seed=2", "completed")
    make_run(tmp_path / "runs" / sweep / "seed=3", "failed")
    script = render(args, tmp_path, monkeypatch)
    assert "#SBATCH --array=0,2%2\n" in script
    assert "    1) " not in script
    document = script.split("printf '%s\\n' '", 1)[1].split("' >", 1)[0]
    assert [point["name"] for point in json.loads(document)["points"]] == [
        "seed=1", "seed=2", "seed=3"
    ]  # fmt: skip
    make_run(tmp_path / "runs" / sweep / "seed=1", "completed")
    make_run(tmp_path / "runs" / sweep / "seed=3.x", "completed")
    (tmp_path / "runs" / sweep / "seed=3" / "manifest.json").write_text('{"status": "completed"}')
    with pytest.raises(DdpimgError, match=rf"every point of sweep {sweep} completed"):
        render(args, tmp_path, monkeypatch)


def test_a_directory_that_holds_another_sweep_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = ["--", "train", "--out", "runs/mine"]
    render(["--sweep", "seed=1,2", *command], tmp_path, monkeypatch)
    (tmp_path / "runs" / "mine").mkdir(parents=True)
    document = {"kind": "ddpimg-sweep", "name": "mine", "command": ["--lr", "1"],
                "axes": [{"name": "seed", "values": ["1"]}], "trials": 0, "seed": 0,
                "points": [{"index": 0, "name": "seed=1", "values": {"seed": "1"}}]}  # fmt: skip
    (tmp_path / "runs" / "mine" / "sweep.json").write_text(json.dumps(document))
    with pytest.raises(DdpimgError, match=r"runs/mine holds another sweep \(mine: --lr 1 over "):
        render(["--sweep", "seed=1,2", *command], tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "lr=1,2", "--array", "0-1", "--", "train"], "--array 0-1 with --sweep"),
        (["--sweep", "lr=1,2", "--", "python", "x.py"], "--sweep runs a train command"),
        (["--sweep", "lr=1,2", "--max-parallel", "0", "--", "train"], "--max-parallel 0: must"),
        (["--max-parallel", "2", "--", "train"], "--max-parallel applies to a sweep"),
        (["--sweep", "lr=x", "--", "train"], "the point lr=x is refused: argument --lr"),
    ],
)
def test_refusals(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DdpimgError, match=message):
        render(args, tmp_path, monkeypatch)
