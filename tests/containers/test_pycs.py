"""containers/scripts/pycs.py: the image's bytecode, written once, hash-checked (PEP 552)."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

from tests.containers.recipes import CONTAINERS, load_script

pycs = load_script("pycs")
SCRIPT = CONTAINERS / "scripts" / "pycs.py"


def package(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .sub import mod\n")
    (root / "pkg" / "sub" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "mod.py").write_text("def f(x):\n    return {'a': (x, 1.5)}\n")
    (root / "pkg" / "newer.py").write_text("type Alias = int\n")  # Python 3.12 syntax
    return root


def pyc_bytes(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*.pyc"))}


def test_compile_writes_checked_hash_pycs_valid_whatever_the_file_times(tmp_path: Path) -> None:
    root = package(tmp_path / "site")
    skipped = pycs.compile_tree([str(root)])
    if sys.version_info < (3, 12):
        assert skipped == [root / "pkg" / "newer.py"]
    written = pyc_bytes(root)
    assert "pkg/sub/__pycache__/mod." + sys.implementation.cache_tag + ".pyc" in written
    assert not pycs.timestamp_pycs([str(root)])
    # Times set to an epoch afterwards leave them valid: imports read them, write nothing.
    for path in root.rglob("*"):
        os.utime(path, (0, 0))
    proc = subprocess.run(
        [sys.executable, "-c", "import pkg; print(pkg.mod.f(2))"],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout.strip() == "{'a': (2, 1.5)}"
    assert pyc_bytes(root) == written


def test_two_compiles_of_the_same_sources_write_the_same_bytes(tmp_path: Path) -> None:
    root = package(tmp_path / "site")
    subprocess.run([sys.executable, str(SCRIPT), "compile", str(root)], check=True)
    first = pyc_bytes(root)
    for path in root.rglob("*.pyc"):
        path.unlink()
    subprocess.run([sys.executable, str(SCRIPT), "compile", str(root)], check=True)
    assert pyc_bytes(root) == first


def test_compile_takes_one_module_and_leaves_its_siblings_alone(tmp_path: Path) -> None:
    # The add-on hook is written after the venv's compile: install-python.sh compiles it alone.
    root = package(tmp_path / "site")
    (root / "hook.py").write_text("def on_start():\n    return 1\n")
    subprocess.run([sys.executable, str(SCRIPT), "compile", str(root / "hook.py")], check=True)
    assert list(pyc_bytes(root)) == ["__pycache__/hook." + sys.implementation.cache_tag + ".pyc"]
    assert not pycs.timestamp_pycs([str(root)])


def test_rehash_rewrites_timestamp_pycs_and_removes_those_without_a_source(
    tmp_path: Path,
) -> None:
    root = package(tmp_path / "usr")
    mod = root / "pkg" / "sub" / "mod.py"
    py_compile.compile(str(mod), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    orphan = root / "pkg" / "__pycache__" / f"gone.{sys.implementation.cache_tag}.pyc"
    orphan.parent.mkdir()
    orphan.write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 12)
    foreign = root / "pkg" / "__pycache__" / "old.cpython-27.pyc"
    foreign.write_bytes(b"\x03\xf3\r\n" + b"\0" * 12)
    assert len(pycs.timestamp_pycs([str(root)])) == 3

    count, others = pycs.rehash([str(root)])
    assert (count, others) == (1, [foreign])
    assert not orphan.exists()
    assert pycs.timestamp_pycs([str(root)]) == [foreign]


def test_check_lists_the_timestamp_pycs_and_fails(tmp_path: Path) -> None:
    root = package(tmp_path / "usr")
    mod = root / "pkg" / "sub" / "mod.py"
    py_compile.compile(str(mod), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "check", str(root)], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout.strip().endswith(f"mod.{sys.implementation.cache_tag}.pyc")


def test_an_optimised_pycs_level_is_kept(tmp_path: Path) -> None:
    assert pycs.optimization(Path("m.cpython-311.opt-2.pyc")) == 2
    assert pycs.optimization(Path("m.cpython-311.pyc")) == 0
    assert pycs.source_of(Path("/a/__pycache__/m.cpython-311.opt-1.pyc")) == Path("/a/m.py")
    assert pycs.source_of(Path("/a/m.pyc")) is None


def test_the_sources_split_into_consecutive_runs_of_about_equal_size(tmp_path: Path) -> None:
    sources = []
    for index, size in enumerate([99, 99, 99, 99, 99, 99, 99, 99, 399, 0, 0, 0]):
        sources.append(tmp_path / f"m{index}.py")
        sources[-1].write_text("#" * size)
    runs = pycs.split(sources, 4)
    assert [source for run in runs for source in run] == sources  # all, in order
    # A source goes to the quarter of the 1,203 bytes (a byte more each) where it starts.
    assert [len(run) for run in runs] == [4, 3, 2, 3]
    assert pycs.split(sources, 4) == runs  # nothing but the files decides it
    assert pycs.split(sources[:1], 4) == [sources[:1]]
