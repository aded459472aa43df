"""A missing optional package is a user error naming it and the extra that installs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.data.tokenizers import cached_gpt2_files
from ddpimg.optional import PACKAGES, missing_package
from ddpimg.runtime.reexec import REEXEC_MARK
from tests.datagen import make_image_tree

# Run ddpimg with ``module`` made unimportable (None in sys.modules: ``import module``
# raises ModuleNotFoundError, as when the package is not installed).
WITHOUT = (
    "import sys; sys.modules[sys.argv[1]] = None; from ddpimg.cli import main; "
    "sys.exit(main(sys.argv[2:]))"
)


def test_every_optional_package_names_an_extra_of_pyproject() -> None:
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    for package, extra in PACKAGES.values():
        assert f"\n{extra} = [" in text, extra
        assert package in text.split(f"\n{extra} = [")[1].split("]")[0], (package, extra)


def test_only_optional_packages_are_user_errors() -> None:
    found = missing_package(ModuleNotFoundError("No module named 'tiktoken'", name="tiktoken"))
    assert found is not None
    assert "pip install 'ddpimg[text]'" in str(found)
    assert exitcodes.for_error(ModuleNotFoundError(name="torchvision.ops")) == exitcodes.USAGE
    assert missing_package(ModuleNotFoundError(name="ddpimg.nothing")) is None
    assert exitcodes.for_error(ModuleNotFoundError(name="ddpimg.nothing")) == 1


@pytest.mark.parametrize(
    ("module", "argv", "named"),
    [
        (
            "torchvision",
            [
                "train",
                "resnet",
                "--data",
                "synthetic",
                "--max-steps",
                "1",
                "--image-size",
                "32",
                "--train-samples",
                "16",
                "--eval-samples",
                "16",
                "--global-batch-size",
                "16",
            ],
            "torchvision ... pip install 'ddpimg[vision]'",
        ),
        (
            # Imported by the resnet trainer's image decoding (issue 47: its absence was a
            # ModuleNotFoundError traceback).
            "simplejpeg",
            [
                "train",
                "resnet",
                "--data",
                "{tree}",
                "--max-steps",
                "1",
                "--image-size",
                "32",
                "--global-batch-size",
                "2",
            ],
            "simplejpeg ... pip install 'ddpimg[train]'",
        ),
        (
            "tiktoken",
            ["data", "tokenize", "{src}", "{dst}", "--tokenizer", "gpt2"],
            "tiktoken ... pip install 'ddpimg[text]'",
        ),
    ],
)
def test_a_command_without_its_package_exits_2_naming_it(
    tmp_path: Path, module: str, argv: list[str], named: str
) -> None:
    (tmp_path / "doc.txt").write_text("hello world\n")
    # The encoding files' check comes before the import: they are there (empty).
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    for path in cached_gpt2_files(cache):
        path.touch()
    tree = tmp_path / "tree"
    if "{tree}" in argv:
        make_image_tree(tree, classes=2, train_per_class=2, val_per_class=1, sizes=(32, 40))
    places = {"src": tmp_path / "doc.txt", "dst": tmp_path / "tokens", "tree": tree}
    filled = [part.format(**places) for part in argv] + (
        ["--out", str(tmp_path / "run")] if argv[0] == "train" else []
    )
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT, module, *filled],
        # No re-exec into a clean environment: it would import the package again.
        env=os.environ | {REEXEC_MARK: "1", "TIKTOKEN_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    package, install = named.split(" ... ")
    assert proc.stderr.startswith(f"ddpimg: error: this needs the Python package {package}")
    assert install in proc.stderr
    assert "Traceback" not in proc.stderr
