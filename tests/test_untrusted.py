"""The one rule for reading what a user was handed (``ddpimg.untrusted``): regular files
only, refused before they are opened; sizes, JSON depth and number lengths bounded before
anything is built; walks that stay inside their root and enter no folder twice."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from ddpimg.untrusted import (
    MAX_JSON_DEPTH,
    BadInput,
    files_inside,
    parse_json,
    read_bytes,
    read_json,
    read_lines,
    walk,
)


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: fifo(p / "x.toml"), r"a FIFO \(named pipe\), not a regular file"),
        (lambda p: Path("/dev/zero"), "a character device, not a regular file"),
        (lambda p: p, "a directory, not a regular file"),
    ],
)
def test_special_files_are_refused_before_they_are_opened(
    tmp_path: Path, make: object, message: str
) -> None:
    """A FIFO would block the open (no writer) and /dev/zero would never end: reading
    either returns at once with the refusal."""
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(BadInput, match=message):
        read_bytes(path, 1 << 20)
    with pytest.raises(BadInput, match=message):
        list(read_lines(path, 100))


def test_a_file_larger_than_its_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as stream:
        stream.truncate(64 << 20)  # sparse: 64 MiB that reading would allocate
    tracemalloc.start()
    try:
        with pytest.raises(BadInput, match=r"67,108,864 bytes, more than the 1 MiB"):
            read_json(path, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, f"nested more than {MAX_JSON_DEPTH} levels"),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "nested more than"),
        ('{"step": ' + "9" * 5000 + "}", "a number of 5,000 digits"),
        ("-" + "1" * 41, "a number of 41 digits"),
        ('{"a": 1', r"not JSON \(Expecting ',' delimiter at line 1, column 8\)"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)
def test_json_beyond_its_bounds_is_a_bad_input(text: str | bytes, message: str) -> None:
    """RecursionError and int()'s own ValueError both escaped readers that caught
    JSONDecodeError (a --resume auto crash on a complete.json nested 100,000 deep)."""
    with pytest.raises(BadInput, match=message):
        parse_json(text)


def test_json_within_bounds_reads_as_json() -> None:
    deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(deep) == json.loads(deep)
    assert parse_json('{"x": [1.5, NaN, -' + "9" * 40 + "]}")["x"][2] == -int("9" * 40)


def test_lines_are_read_one_at_a_time_within_their_bound(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b"x" * 300 + b"\n")
    lines = read_lines(path, 100)
    assert next(lines) == '{"a": 1}\n'
    with pytest.raises(BadInput, match="line 2 is longer than 100 bytes"):
        next(lines)


def tree(root: Path) -> Path:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "1.jpg").write_bytes(b"x")
    (root / "2.jpg").write_bytes(b"x")
    return root


def test_a_walk_follows_a_link_inside_its_root_once(tmp_path: Path) -> None:
    """As os.walk(followlinks=True), but no folder twice: the images under a second way into
    a folder would be read twice."""
    root = tree(tmp_path / "root")
    walked = {os.path.relpath(folder, root): files for folder, _, files in walk(root)}
    assert walked == {".": ["2.jpg"], "a": [], "a/b": ["1.jpg"]}
    (root / "alias").symlink_to(root / "a" / "b")
    with pytest.raises(BadInput, match=r"root/alias is a folder the walk of .* already went"):
        list(walk(root))
    moved = tree(tmp_path / "moved")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cat").symlink_to(moved)  # the root itself may be a link
    assert len(list(walk(tmp_path / "data" / "cat"))) == 3


def test_a_walk_refuses_a_link_out_of_its_root(tmp_path: Path) -> None:
    root = tree(tmp_path / "root")
    (root / "a" / "up").symlink_to("../..")
    with pytest.raises(BadInput, match=r"root/a/up is a link to .*, outside .*root"):
        list(walk(root / "a"))


def test_a_walk_ends_at_a_loop_of_links(tmp_path: Path) -> None:
    """Two links to "." made os.walk(followlinks=True) walk 2^depth folders."""
    root = tree(tmp_path / "root")
    (root / "a" / "l1").symlink_to(".")
    (root / "a" / "l2").symlink_to(".")
    with pytest.raises(BadInput, match=r"already went through \(a loop of links"):
        list(walk(root / "a"))


def test_files_inside_refuses_a_file_link_out(tmp_path: Path) -> None:
    root = tree(tmp_path / "root")
    secret = tmp_path / "id_rsa"
    secret.write_text("key")
    assert files_inside(root) == [Path("2.jpg"), Path("a/b/1.jpg")]
    (root / "a" / "key").symlink_to(secret)
    with pytest.raises(BadInput, match=r"a/key is a link to .*id_rsa, outside"):
        files_inside(root)
