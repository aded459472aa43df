"""Staging by content on a login node (a local one, tests.remote.fakes): what the store lacks
is sent once; the tree is laid out as hard links; a stream that breaks, or a content whose sum
does not match, leaves nothing behind."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote import programs
from ddpimg.remote.stage import stage_tree, write_stream
from ddpimg.remote.submit import addon_words, with_addons
from ddpimg.remote.transport import RemoteError
from ddpimg.remote.tree import Limits, collect_tree
from tests.remote.fakes import LocalLogin


@pytest.fixture
def login(tmp_path: Path) -> LocalLogin:
    return LocalLogin(tmp_path / "login")


@pytest.fixture
def tree_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "same.txt").write_text("same")
    (root / "other.txt").write_text("same")  # the same content: one object
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_a_second_stage_of_the_same_tree_sends_no_content(
    login: LocalLogin, tree_dir: Path
) -> None:
    tree = collect_tree(tree_dir, ["."], Limits())
    first = stage_tree(login, tree, "remote", "job-1")
    assert (first.files, first.new_files, first.new_bytes) == (4, 3, 15 + 4 + 10)
    second = stage_tree(login, tree, "remote", "job-2")
    assert (second.files, second.new_files, second.new_bytes) == (4, 0, 0)
    job = login.home / "remote" / "jobs" / "job-2"
    assert second.job_dir == str(job)
    assert (job / "train.py").read_text() == "print('train')\n"
    assert (job / "run.sh").stat().st_mode & 0o111
    assert (job / "pkg" / "same.txt").stat().st_ino == (job / "other.txt").stat().st_ino
    assert (job / "train.py").stat().st_ino == (
        login.home / "remote" / "jobs" / "job-1" / "train.py"
    ).stat().st_ino
    assert not list((login.home / "remote" / "incoming").iterdir())


def test_a_content_that_does_not_match_its_sum_is_not_kept(
    login: LocalLogin, tree_dir: Path
) -> None:
    tree = collect_tree(tree_dir, ["."], Limits())

    class Tampered(LocalLogin):
        def write_stream(self, program, what, produce, *, timeout):  # type: ignore[no-untyped-def]
            def tampered(pipe):  # type: ignore[no-untyped-def]
                buffer = io.BytesIO()
                produce(buffer)
                pipe.write(buffer.getvalue().replace(b"print('train')", b"print('other')"))

            return super().write_stream(program, what, tampered, timeout=timeout)

    tampered = Tampered(login.home.parent)
    with pytest.raises(RemoteError, match="staging the tree into remote/jobs/job-1 failed"):
        stage_tree(tampered, tree, "remote", "job-1")
    remote = login.home / "remote"
    assert not (remote / "jobs" / "job-1").exists()
    assert not list((remote / "objects").rglob("*"))
    assert not list((remote / "incoming").iterdir())


def test_a_stream_cut_short_leaves_nothing(login: LocalLogin, tree_dir: Path) -> None:
    tree = collect_tree(tree_dir, ["."], Limits())
    program = programs.unpack("remote", "job-1", "token")

    def half(pipe):  # type: ignore[no-untyped-def]
        buffer = io.BytesIO()
        write_stream(buffer, tree, tree.files, "job-1", "token")
        pipe.write(buffer.getvalue()[:1536])

    done = login.write_stream(program, "a cut stream", half, timeout=30)
    assert done.status == programs.TAR_FAILED
    assert not (login.home / "remote" / "jobs" / "job-1").exists()
    assert not (login.home / "remote" / "incoming" / "token").exists()


def test_the_stream_holds_links_into_the_store_and_the_new_contents(tree_dir: Path) -> None:
    tree = collect_tree(tree_dir, ["."], Limits())
    buffer = io.BytesIO()
    new = [f for f in tree.files if f.path == "train.py"]
    write_stream(buffer, tree, new, "job", "tok")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        members = {m.name: m for m in tar}
    fresh = new[0].object_name
    assert members[f"incoming/tok/{fresh}"].isreg()
    assert members["jobs/job/train.py"].linkname == f"incoming/tok/{fresh}"
    same = next(f for f in tree.files if f.path == "other.txt").object_name
    assert members["jobs/job/other.txt"].linkname == f"objects/{same}"
    assert all(".." not in name and not name.startswith("/") for name in members)


def test_an_addon_outside_the_tree_is_staged_by_content_once(
    login: LocalLogin, tree_dir: Path, tmp_path: Path
) -> None:
    """``ddpimg submit --addon FILE``: the file joins the submission at .ddpimg-addons/, and
    a second submit of the same add-on sends nothing."""
    addon = tmp_path / "elsewhere" / "timm.addon.sqsh"
    addon.parent.mkdir()
    addon.write_bytes(b"hsqs" + bytes(4092))
    tree = with_addons(collect_tree(tree_dir, ["."], Limits()), [str(addon)])
    first = stage_tree(login, tree, "remote", "job-1")
    assert (first.files, first.new_files) == (5, 4)
    second = stage_tree(login, tree, "remote", "job-2")
    assert (second.new_files, second.new_bytes) == (0, 0)
    staged = login.home / "remote" / "jobs" / "job-2" / ".ddpimg-addons" / "timm.addon.sqsh"
    assert staged.read_bytes() == addon.read_bytes()
    assert addon_words(second.job_dir, [str(addon)]) == [f"--addon={staged}"]
    with pytest.raises(DdpimgError, match="no add-on file there"):
        with_addons(tree, [str(tree_dir / "train.py")])
