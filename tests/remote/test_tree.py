"""The tree submit stages: what git would track from where it runs (never the local runs
root), or what --include names; limits checked before anything is read; links and special
files as the module says."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote.tree import Limits, collect_tree, describe_size


def git_tree(root: Path) -> Path:
    (root / "exp" / "data").mkdir(parents=True)
    (root / "exp" / "train.py").write_text("print(1)\n")
    (root / "exp" / "run.sh").write_text("#!/bin/sh\n")
    (root / "exp" / "run.sh").chmod(0o755)
    (root / "exp" / "data" / "a.txt").write_text("a")
    (root / ".gitignore").write_text("*.bin\n")
    (root / "exp" / "big.bin").write_bytes(b"\0" * 10)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, timeout=30)
    subprocess.run(["git", "add", "exp/train.py", ".gitignore"], cwd=root, check=True, timeout=30)
    return root / "exp"


def test_what_git_tracks_and_would_add_from_a_subdirectory(tmp_path: Path) -> None:
    exp = git_tree(tmp_path)
    (exp / "runs" / "mnist-1").mkdir(parents=True)
    (exp / "runs" / "mnist-1" / "metrics.jsonl").write_text("{}\n")
    tree = collect_tree(exp, (), Limits(), outputs=Path("runs"))
    assert (tree.root, tree.subdir, tree.source) == (tmp_path, "exp", "git")
    assert [f.path for f in tree.files] == [
        ".gitignore",
        "exp/data/a.txt",
        "exp/run.sh",
        "exp/train.py",
    ]
    executable = {f.path: f.executable for f in tree.files}
    assert executable["exp/run.sh"]
    assert not executable["exp/train.py"]
    item = next(f for f in tree.files if f.path == "exp/train.py")
    assert item.object_name == f"{item.digest[:2]}/{item.digest}"


def test_outside_git_nothing_and_with_include_what_it_names(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("x")
    (tmp_path / "b.txt").write_text("b")
    assert collect_tree(tmp_path, (), Limits()).files == ()
    tree = collect_tree(tmp_path, ["a", "b.txt", "a/x.py"], Limits())
    assert (tree.source, [f.path for f in tree.files]) == ("--include", ["a/x.py", "b.txt"])
    # The runs root is outputs, not code, with --include too (--include . would stage
    # fetched checkpoints).
    (tmp_path / "runs" / "mnist-1").mkdir(parents=True)
    (tmp_path / "runs" / "mnist-1" / "model.pt").write_text("weights")
    tree = collect_tree(tmp_path, ["."], Limits(), outputs=Path("runs"))
    assert [f.path for f in tree.files] == ["a/x.py", "b.txt"]


@pytest.mark.parametrize(
    ("include", "message"),
    [
        ("../elsewhere", "--include ../elsewhere: not under the directory submit runs in"),
        ("missing", "--include missing: no such file or directory"),
    ],
)
def test_an_include_outside_or_missing_is_an_error(
    tmp_path: Path, include: str, message: str
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(DdpimgError, match=message.replace(".", r"\.")):
        collect_tree(tmp_path / "in", [include], Limits())


def test_links_in_the_tree_are_content_out_of_it_an_error_fifos_too(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "real.txt").write_text("r")
    (tmp_path / "in" / "inside").symlink_to("real.txt")
    tree = collect_tree(tmp_path / "in", ["inside"], Limits())
    assert [(f.path, f.size) for f in tree.files] == [("inside", 1)]
    (tmp_path / "secret").write_text("s")
    (tmp_path / "in" / "out").symlink_to(tmp_path / "secret")
    with pytest.raises(DdpimgError, match="out is a symbolic link out of the tree"):
        collect_tree(tmp_path / "in", ["out"], Limits())
    os.mkfifo(tmp_path / "in" / "pipe")
    with pytest.raises(DdpimgError, match="pipe is not a regular file"):
        collect_tree(tmp_path / "in", ["pipe"], Limits())


def test_a_tree_too_large_names_the_limit_its_flag_and_the_largest(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"\0" * 3_000_000)
    (tmp_path / "small.py").write_text("x")
    with pytest.raises(
        DdpimgError,
        match=r"is 3\.0 MB in 2 files, more than --max-stage-size 2 MB "
        r"\(largest: big\.bin \(3\.0 MB\), small\.py \(1 B\)\)",
    ) as found:
        collect_tree(tmp_path, ["."], Limits(max_bytes=2 << 20))
    assert "raise --max-stage-size" in str(found.value)
    with pytest.raises(DdpimgError, match="holds 2 files, more than --max-stage-files 1"):
        collect_tree(tmp_path, ["."], Limits(max_files=1))


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (999, "999 B"), (1500, "1.5 kB"), (2_500_000, "2.5 MB"), (3 * 10**9, "3.0 GB")],
)
def test_describe_size(size: int, text: str) -> None:
    assert describe_size(size) == text
