"""NAME.lock and addon.json: what ddpimg writes reads back the same, and what someone else
wrote ends in a lock or a named error (ddpimg.addon.lockfile, ddpimg.addon.metadata)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Lock, Locked, new_lock, parse_lock
from ddpimg.addon.metadata import AddonInfo, read_info, write_info
from ddpimg.addon.packageset import PackageSet
from tests.fuzz import FUZZ, within_bounds

IMAGE = PackageSet(
    "b" * 64,
    {"python": "3.11", "implementation": "cpython-311", "platform": "linux-x86_64"},
    {"torch": "2.13.0+cpu"},
    {"flavour": "cpu", "lock": "cpu", "lock_sha256": "f7a6ac41637270c8"},
)
PACKAGES = [
    Locked("timm", "1.0.31", "1" * 64, "timm-1.0.31-py3-none-any.whl"),
    Locked("addon-probe-sdist", "1.0", "2" * 64, "addon_probe_sdist-1.0.tar.gz"),
]


def _lock() -> Lock:
    return new_lock("timm", IMAGE, ["timm==1.0.31", "einops"], PACKAGES)


def test_a_lock_reads_back_as_written() -> None:
    lock = _lock()
    text = lock.text()
    assert text.splitlines()[2:7] == [
        "# name: timm",
        f"# package-set: {'b' * 64}",
        "# interpreter: python 3.11, cpython-311, linux-x86_64",
        "# image: image ddpimg cpu, lock cpu f7a6ac416372",
        "# requirement: timm==1.0.31",
    ]
    assert parse_lock(text, "timm.lock") == lock
    # pip's hash-checking form, sorted, written from the parsed entries.
    assert lock.hashed_requirements() == (
        f"addon-probe-sdist==1.0 --hash=sha256:{'2' * 64}\ntimm==1.0.31 --hash=sha256:{'1' * 64}\n"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("timm==1.0.31 \\", "timm>=1.0 \\"), r"line 12: not a NAME==VERSION"),
        (lambda t: t.replace("--hash=sha256:" + "1" * 64, "--hash=md5:00"), r"line 13: expected"),
        (lambda t: t.replace("# name: timm\n", ""), r"lacks a valid '# name:'"),
        (lambda t: t.replace("b" * 64, "b" * 63), r"lacks a valid .*'# package-set:'"),
        (lambda t: t + "timm==1.0.31 \\\n", r"its last entry timm==1.0.31 has no hash"),
        (lambda t: t + "-e ./evil\n", r"line 15: not a NAME==VERSION entry: -e \./evil"),
    ],
)
def test_a_broken_lock_names_its_line(edit: object, message: str) -> None:
    text = edit(_lock().text())  # type: ignore[operator]
    with pytest.raises(AddonError, match=message):
        parse_lock(text, "timm.lock")


def test_a_package_locked_twice_is_refused() -> None:
    text = _lock().text()
    entry = text[text.index("\ntimm==") + 1 :]
    with pytest.raises(AddonError, match="timm locked more than once"):
        parse_lock(text + entry, "timm.lock")


lock_lines = st.one_of(
    st.sampled_from(_lock().text().splitlines()),
    st.text(max_size=80),
    st.just("x==1 \\"),
    st.just("    --hash=sha256:" + "a" * 64),
)


@FUZZ
@given(lines=st.lists(lock_lines, max_size=30))
def test_any_lock_text_ends_in_a_lock_or_a_named_error(lines: list[str]) -> None:
    with within_bounds("parse_lock"):
        try:
            lock: Lock | str = parse_lock("\n".join(lines), "fuzzed.lock")
        except AddonError as err:
            lock = err.message
    if isinstance(lock, str):
        assert lock.startswith("lock fuzzed.lock")
    else:
        assert len(lock.package_set) == 64


def test_addon_json_reads_back_and_refuses_what_no_addon_has(tmp_path: Path) -> None:
    lock = _lock()
    info = AddonInfo.from_lock(lock, "c" * 64)
    write_info(tmp_path, info, lock.text())
    assert read_info(tmp_path) == info
    assert (tmp_path / "package-set").read_text() == "b" * 64 + "\n"
    assert (tmp_path / "timm.lock").read_text() == lock.text()
    assert info.package_words() == "addon-probe-sdist 1.0, timm 1.0.31"
    document = json.loads((tmp_path / "addon.json").read_text())
    for broken, message in (
        (document | {"schema": 2}, "not an add-on description of schema 1"),
        (document | {"packages": {"timm": 1}}, "'packages' must map names to versions"),
        (document | {"name": "../x"}, "a name '../x' or package set that no add-on has"),
        ({k: v for k, v in document.items() if k != "lock_sha256"}, "'lock_sha256' is missing"),
        ([1, 2], "not an add-on description"),
    ):
        (tmp_path / "addon.json").write_text(json.dumps(broken))
        with pytest.raises(AddonError, match=message):
            read_info(tmp_path)
    (tmp_path / "addon.json").write_text("[" * 5000)
    with pytest.raises(AddonError, match=r"cannot be read .*nested more than"):
        read_info(tmp_path)
