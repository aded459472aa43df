"""containers/imagebuild/locks.py: the lock table, each flavour's default, `nox -s lock`."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.imagebuild import locks
from containers.imagebuild.locks import DEFAULT_LOCK, LOCKS, Lock
from tests.containers.imagebuild.fakes import FakeSession, SessionError
from tests.containers.recipes import CONTAINERS, DEFS, read_definition, read_dockerfile


def test_the_default_lock_is_committed() -> None:
    """The Dockerfile's own example command (no TORCH_SOURCE) works on a fresh checkout."""
    assert locks.missing_lock(DEFAULT_LOCK) is None
    assert (CONTAINERS / "lock" / f"{DEFAULT_LOCK}.txt").is_file()


def test_the_dockerfile_takes_each_flavours_default_lock() -> None:
    """TORCH_SOURCE is empty unless passed; the build stage then picks the flavour's."""
    defaults = [
        instruction.args.partition("=")[2]
        for instruction in read_dockerfile()
        if instruction.keyword == "ARG" and instruction.args.startswith("TORCH_SOURCE")
    ]
    assert defaults == [""]
    picks = [
        instruction.args
        for instruction in read_dockerfile()
        if instruction.keyword == "RUN" and "TORCH_SOURCE:-" in instruction.args
    ]
    assert len(picks) == 1
    assert (
        f'${{TORCH_SOURCE:-$([ "$FLAVOUR" = cpu ] && echo {locks.default_lock("cpu")} '
        f"|| echo {locks.default_lock('gpu')})}}" in picks[0]
    )


def test_the_dockerfile_example_names_no_lock() -> None:
    header = (CONTAINERS / "Dockerfile").read_text(encoding="utf-8").split("\nARG ", 1)[0]
    example = [line for line in header.splitlines() if "git archive HEAD | docker build" in line]
    assert len(example) == 1
    assert "TORCH_SOURCE" not in example[0]
    assert "FLAVOUR=cpu" in example[0]


def test_the_standalone_definition_defaults_to_the_default_lock() -> None:
    assert read_definition(DEFS["ddp-standalone.def"]).arguments["TORCH_SOURCE"] == DEFAULT_LOCK


@pytest.mark.parametrize(
    ("flavour", "lock", "tag"),
    [
        ("gpu", "pypi", "ddpimg:gpu"),
        ("gpu", "pypi-cu128", "ddpimg:gpu-cu128"),
        ("gpu", "pypi-arm64", "ddpimg:gpu-arm64"),
        ("cpu", "pypi", "ddpimg:cpu"),
        ("cpu", "cpu", "ddpimg:cpu"),
    ],
)
def test_default_tag(flavour: str, lock: str, tag: str) -> None:
    assert locks.default_tag(flavour, lock) == tag


def test_missing_lock_says_how_to_make_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCKS, "nope", Lock(index="https://index.invalid/whl"))
    reason = locks.missing_lock("nope")
    assert reason == (
        "containers/lock/nope.txt does not exist: make it with `nox -s lock -- nope` where "
        "https://index.invalid/whl is reachable, or build with --torch pypi"
    )


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_compile_command_writes_the_lock_and_says_how(name: str) -> None:
    command = locks.compile_command(name)
    assert command[:3] == ["uv", "pip", "compile"]
    assert command[command.index("--output-file") + 1] == f"containers/lock/{name}.txt"
    assert command[command.index("--custom-compile-command") + 1] == f"nox -s lock -- {name}"
    assert command[command.index("--python-version") + 1] == locks.LOCK_PYTHON
    assert "--generate-hashes" in command


@pytest.mark.parametrize("name", ["pypi", "pypi-cu128"])
def test_a_lock_without_a_platform_is_universal(name: str) -> None:
    command = locks.compile_command(name)
    assert "--universal" in command
    assert "--python-platform" not in command


def test_the_aarch64_platform_names() -> None:
    platform = locks.AARCH64
    assert (platform.docker, platform.python, platform.uv) == (
        "linux/arm64",
        "linux-aarch64",
        "aarch64-manylinux_2_28",
    )


def test_wheel_tags_are_every_manylinux_tag_of_its_glibc_newest_first() -> None:
    tags = locks.AARCH64.wheel_tags()
    assert tags[0] == "manylinux_2_28_aarch64"
    assert tags[-1] == "manylinux2014_aarch64"
    assert len(tags) == len(set(tags)) == 13  # 2_28 .. 2_17, and manylinux2014 (= 2_17)
    # The tags of the arm64 lock's files that a list of only 2_28 and 2_17 misses.
    assert {"manylinux_2_27_aarch64", "manylinux_2_25_aarch64", "manylinux_2_18_aarch64"} < set(
        tags
    )


def test_pip_args_name_each_tag_and_the_python() -> None:
    args = locks.AARCH64.pip_args("3.11")
    platforms = [args[i + 1] for i, word in enumerate(args) if word == "--platform"]
    assert platforms == locks.AARCH64.wheel_tags()
    assert args[args.index("--python-version") + 1] == "3.11"
    assert args[args.index("--implementation") + 1] == "cp"
    assert args[args.index("--abi") + 1] == "cp311"


def test_the_arm64_lock_is_resolved_for_aarch64_manylinux_2_28() -> None:
    command = locks.compile_command("pypi-arm64")
    assert command[command.index("--python-platform") + 1] == "aarch64-manylinux_2_28"
    assert "--universal" not in command  # uv takes one or the other


def test_compile_command_takes_the_lock_overrides() -> None:
    command = locks.compile_command("pypi-cu128")
    assert command[command.index("--override") + 1] == "containers/overrides/pypi-cu128.txt"
    assert "--override" not in locks.compile_command("pypi")


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_override_file_exists(name: str) -> None:
    overrides = LOCKS[name].overrides
    assert overrides is None or overrides.is_file()


def test_make_refuses_an_unknown_lock_before_installing(session: FakeSession) -> None:
    known = "pypi, cpu, pypi-cu128, pypi-arm64"
    with pytest.raises(SessionError, match=f"unknown lock nope: choose from {known}"):
        locks.make(session, ["nope"])
    assert not session.installs


def test_make_fails_on_a_named_lock_whose_index_is_out_of_reach(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "unreachable", lambda url: f"{url}: no route")
    with pytest.raises(SessionError, match=r"lock cpu: its index cannot be reached: .*no route"):
        locks.make(session, ["cpu"], env={})
    assert not session.runs


def test_make_all_skips_the_locks_whose_index_is_out_of_reach(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "unreachable", lambda url: f"{url}: no route")
    locks.make(session, [], env={})
    assert session.installs == [(locks.UV,)]
    made = [run[run.index("--output-file") + 1] for run in session.runs]
    assert made == [
        "containers/lock/pypi.txt",
        "containers/lock/pypi-cu128.txt",
        "containers/lock/pypi-arm64.txt",
    ]
    assert len(session.warnings) == 1
    assert session.warnings[0].startswith("not made (index unreachable from here): cpu (")


def test_make_searches_a_reachable_index(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "unreachable", lambda url: None)
    locks.make(session, ["cpu"], env={})
    (run,) = session.runs
    assert run[run.index("--extra-index-url") + 1] == LOCKS["cpu"].index
    assert "--find-links" not in run


def test_make_takes_an_unreachable_indexs_files_from_pips_find_links(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(locks, "unreachable", lambda url: f"{url}: no route")
    locks.make(session, ["cpu"], env={"PIP_FIND_LINKS": str(tmp_path)})
    (run,) = session.runs
    assert "--extra-index-url" not in run
    assert run[run.index("--find-links") + 1] == str(tmp_path)
    assert "no route" in session.warnings[0]


def test_each_flavour_has_its_default_lock_committed() -> None:
    assert locks.default_lock("gpu") == DEFAULT_LOCK
    assert locks.default_lock("cpu") == locks.CPU_LOCK != DEFAULT_LOCK
    assert locks.missing_lock(locks.CPU_LOCK) is None


def test_with_notes_puts_the_notes_after_uvs_header_once() -> None:
    made = "# autogenerated by uv\n#    nox -s lock -- cpu\ntorch==2.13.0+cpu \\\n    --hash=x\n"
    noted = locks.with_notes(made, ["one", "two"])
    assert noted.splitlines()[:4] == [
        "# autogenerated by uv",
        "#    nox -s lock -- cpu",
        "# note: one",
        "# note: two",
    ]
    assert noted.endswith("torch==2.13.0+cpu \\\n    --hash=x\n")
    # Made again: the notes replace the old ones.
    assert locks.with_notes(noted, ["three"]).count("# note: ") == 1


def test_the_committed_cpu_lock_carries_its_notes() -> None:
    """`nox -s lock -- cpu` wrote LOCKS' notes into it; build_info.py reads them from there."""
    text = locks.lock_file("cpu").read_text(encoding="utf-8")
    assert locks.LOCKS["cpu"].notes
    assert locks.with_notes(text, locks.LOCKS["cpu"].notes) == text


def test_find_links_keeps_the_directories_that_exist(tmp_path: Path) -> None:
    env = {"PIP_FIND_LINKS": f"{tmp_path} /nonexistent/wheels https://example.invalid/w"}
    assert locks.find_links(env) == [str(tmp_path)]
    assert locks.find_links({}) == []
