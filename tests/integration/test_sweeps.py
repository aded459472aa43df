"""train --sweep with the real trainer: a 2x2 sweep of train mnist (tiny) runs each point in
its own run directory under runs/SWEEP, two at a time, with the point's options in its
manifest; ddpimg runs and ddpimg plot read the sweep; the same command again runs nothing.

The Slurm array (one task a point, a preempted task continuing alone) is
tests/integration/test_sbatch.py's; a script's sweep submitted from a laptop and followed to
its end, tests/multinode/test_remote.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.runs import command, run, summary

TRAIN = [
    "--data", "synthetic", "--max-steps", "3", "--log-every", "1", "--global-batch-size", "32",
    "--train-samples", "96", "--eval-samples", "64",
]  # fmt: skip
SWEEP = ["--sweep", "lr=0.5,0.25", "--sweep", "seed=1,2"]
PNG = b"\x89PNG\r\n\x1a\n"


def test_a_two_by_two_sweep_of_mnist_runs_each_point_in_its_own_directory(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    env = run_env | {"XDG_STATE_HOME": str(tmp_path / "state")}
    done = run([command("train"), *SWEEP, "--parallel", "2", *TRAIN], env, cwd=tmp_path)
    (sweep,) = (tmp_path / "runs").iterdir()
    assert sweep.name.startswith("mnist-lr-seed-")
    points = {
        f"lr={lr}_seed={seed}": (float(lr), seed) for lr in ("0.5", "0.25") for seed in (1, 2)
    }
    assert sorted(path.name for path in sweep.iterdir() if path.is_dir()) == sorted(points)
    started = {}
    for name, (lr, seed) in points.items():
        manifest = json.loads((sweep / name / "manifest.json").read_text())
        assert manifest["status"] == "completed", (sweep / name / "train.log").read_text()
        assert (manifest["arguments"]["lr"], manifest["seed"]) == (lr, seed)
        assert manifest["arguments"]["out"] == f"runs/{sweep.name}/{name}"
        assert summary(sweep / name)["steps"] == 3
        started[name] = manifest["started_utc"]
    table = done.stdout.splitlines()
    assert table[0].split() == ["point", "status", "steps", "loss", "eval", "loss"]
    assert table[-1].startswith(f"sweep {sweep.name}: 4/4 completed; best lr=")
    assert "2 at a time" in done.stderr
    listed = run([command("ddpimg"), "runs", "--json"], env, cwd=tmp_path).stdout
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["kind"], row["completed"], row["best"]) == ("sweep", 4, table[-1].split()[-4])
    image = tmp_path / "sweep.png"
    run([command("ddpimg"), "plot", sweep.name, "-o", str(image)], env, cwd=tmp_path)
    assert image.read_bytes()[:8] == PNG
    # The same command again: every point completed, nothing runs, nothing is rewritten.
    again = run([command("train"), *SWEEP, *TRAIN], env, cwd=tmp_path)
    assert "0 of 4 points to run" in again.stderr
    assert [json.loads((sweep / n / "manifest.json").read_text())["started_utc"]
            for n in points] == list(started.values())  # fmt: skip
