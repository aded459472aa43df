"""ddpimg.imagetree: the tree digest the build records and `ddpimg doctor --verify` recomputes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ddpimg import imagetree
from ddpimg.imagetree import ListingError, TreeDiff, TreeEntry


def make_tree(root: Path) -> Path:
    """A small image-like tree: a venv with a package, a link, an executable and a pyc."""
    package = root / "venv" / "lib" / "site-packages" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\x00" * 16)
    (root / "venv" / "bin").mkdir()
    (root / "venv" / "bin" / "train").write_text("#!/bin/sh\n")
    (root / "venv" / "bin" / "train").chmod(0o755)
    (root / "venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "odd name\nwith a break").write_text("x")
    return root


def record(tree: Path, listing: Path, roots: list[str]) -> dict[str, Any]:
    """The build record's ``tree`` as build_info.py writes it, for ``roots``."""
    entries = imagetree.scan(roots)
    data = imagetree.render(entries)
    listing.write_bytes(data)
    return {
        "tree": {
            "digest": imagetree.tree_digest(data),
            "listing": str(listing),
            "roots": roots,
            "entries": len(entries),
        }
    }


def test_a_listing_names_each_entry_with_its_kind_mode_and_digest(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "opt")
    entries = {entry.path: entry for entry in imagetree.scan([str(root)])}
    init = entries[str(root / "venv/lib/site-packages/pkg/__init__.py")]
    assert (init.kind, init.mode) == ("f", 0o644)
    assert init.digest == hashlib.sha256(b"VALUE = 1\n").hexdigest()
    assert entries[str(root / "venv/bin/train")].mode == 0o755
    link = entries[str(root / "venv/bin/python")]
    assert (link.kind, link.digest) == ("l", hashlib.sha256(b"/usr/bin/python3").hexdigest())
    assert entries[str(root / "venv")].kind == "d"
    assert list(entries) == sorted(entries)


def test_render_and_parse_are_inverses_even_for_a_name_with_a_line_break(tmp_path: Path) -> None:
    entries = imagetree.scan([str(make_tree(tmp_path / "opt"))])
    listing = imagetree.render(entries)
    assert imagetree.parse(listing) == entries
    assert len(listing.splitlines()) == len(entries)  # the break is escaped


def test_the_digest_follows_content_and_mode_not_times(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "opt")
    before = imagetree.tree_digest(imagetree.render(imagetree.scan([str(root)])))
    module = root / "venv/lib/site-packages/pkg/__init__.py"
    os.utime(module, (0, 0))
    assert imagetree.tree_digest(imagetree.render(imagetree.scan([str(root)]))) == before
    module.chmod(0o600)
    assert imagetree.tree_digest(imagetree.render(imagetree.scan([str(root)]))) != before


def test_compare_names_what_was_added_removed_and_changed() -> None:
    recorded = [TreeEntry("/a", "f", 0o644, "1"), TreeEntry("/b", "f", 0o644, "2")]
    current = [TreeEntry("/a", "f", 0o644, "9"), TreeEntry("/c", "f", 0o644, "3")]
    assert imagetree.compare(recorded, current) == TreeDiff(
        added=["/c"], removed=["/b"], changed=["/a"]
    )
    assert not imagetree.compare(recorded, recorded)


@pytest.mark.parametrize(
    "listing",
    [b"x 0644 - /a\n", b"f 0644 /a\n", b"f 06z4 - /a\n", b"f 0644 - /a\\q\n"],
)
def test_a_listing_that_render_did_not_write_is_refused(listing: bytes) -> None:
    with pytest.raises(ListingError, match="line 1"):
        imagetree.parse(listing)


def test_image_roots_are_ddpimgs_directory_the_interpreter_and_its_stdlib() -> None:
    roots = imagetree.image_roots(
        "/opt/ddpimg",
        "/opt/ddpimg/venv/bin/python",
        {"stdlib": "/usr/lib/python3.11", "platstdlib": "/usr/lib/python3.11"},
    )
    # The venv's python is a link into /opt/ddpimg here: covered by its root already.
    assert roots == ["/opt/ddpimg", "/usr/lib/python3.11"]


def test_verify_is_clean_on_the_recorded_tree_and_names_each_change(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "opt")
    info = record(root, tmp_path / "tree.txt", [str(root)])
    clean = imagetree.verify(info)
    assert clean.ok
    assert clean.current == info["tree"]["digest"]

    module = root / "venv/lib/site-packages/pkg/__init__.py"
    module.write_text("VALUE = 2\n")  # a patched module
    (root / "venv/lib/site-packages/timm").mkdir()  # a pip install
    (root / "venv/bin/train").unlink()
    result = imagetree.verify(info)
    assert not result.ok
    assert result.recorded == info["tree"]["digest"] != result.current
    assert result.diff.changed == [str(module)]
    assert result.diff.added == [str(root / "venv/lib/site-packages/timm")]
    assert result.diff.removed == [str(root / "venv/bin/train")]


def test_an_edited_listing_is_named_even_when_it_matches_the_tree(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "opt")
    listing = tmp_path / "tree.txt"
    info = record(root, listing, [str(root)])
    info["tree"]["digest"] = "sha256:" + "0" * 64  # the record and its listing disagree
    result = imagetree.verify(info)
    assert not result.ok
    assert result.diff.changed == [str(listing)]


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({}, "no tree digest"),
        ({"tree": {"digest": "sha256:0", "listing": 3, "roots": []}}, "malformed"),
        ({"tree": {"digest": "sha256:0", "listing": "/x", "roots": "/opt"}}, "malformed"),
    ],
)
def test_a_record_without_a_usable_tree_is_refused(info: dict[str, Any], message: str) -> None:
    with pytest.raises(ListingError, match=message):
        imagetree.verify(json.loads(json.dumps(info)))


def test_what_is_mounted_in_the_addons_directory_is_not_part_of_the_tree(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "opt")
    addons = root / "addons"
    addons.mkdir()
    before = imagetree.render(imagetree.scan([str(root)], unlisted=[str(addons)]))
    (addons / "timm" / "site-packages").mkdir(parents=True)
    (addons / "timm" / "site-packages" / "timm.py").write_text("x = 1\n")
    after = imagetree.scan([str(root)], unlisted=[str(addons)])
    assert imagetree.render(after) == before
    assert str(addons) in {entry.path for entry in after}  # the directory itself is listed
    assert str(addons / "timm") in {e.path for e in imagetree.scan([str(root)], unlisted=[])}
    assert imagetree.mounted_addons(str(addons)) == ["timm"]
    assert imagetree.mounted_addons(str(tmp_path / "none")) == []
