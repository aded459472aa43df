"""containers/imagebuild/context.py: the staged build context and the source facts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from containers.imagebuild import context
from tests.containers.recipes import ROOT


def test_stage_context_copies_the_tree_without_caches(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("PEM")
    staged = tmp_path / "context"
    staged.mkdir()
    context.stage_context(staged, extra_ca=ca, root=ROOT)
    assert sorted(p.name for p in staged.iterdir()) == sorted(context.CONTEXT)
    assert (staged / "containers" / "Dockerfile").is_file()
    assert (staged / "src" / "ddpimg" / "__init__.py").is_file()
    assert not [p for p in staged.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]
    assert (staged / "containers" / "build-inputs" / "extra-ca.pem").read_text() == "PEM"


def test_stage_context_without_a_ca(tmp_path: Path) -> None:
    context.stage_context(tmp_path, root=ROOT)
    assert not (tmp_path / context.EXTRA_CA).exists()


def _git(repo: Path, *args: str, date: str = "1700000000 +0000") -> None:
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "HOME": str(repo)}
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, env=env, check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.2.3"\n')
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "pyproject.toml")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_source_facts_of_a_clean_tree(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    facts = context.source_facts(repo)
    assert len(facts["REVISION"]) == 40
    assert facts["SOURCE_DATE_EPOCH"] == "1700000000"
    assert facts["CREATED"] == "2023-11-14T22:13:20Z"
    assert facts["VERSION"] == "1.2.3"


def test_source_facts_mark_a_dirty_tree_and_take_the_epoch_given(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "pyproject.toml").write_text('[project]\nversion = "1.2.4"\n')
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    facts = context.source_facts(repo)
    assert facts["REVISION"].endswith("-dirty")
    assert (facts["SOURCE_DATE_EPOCH"], facts["CREATED"]) == ("0", "1970-01-01T00:00:00Z")
    assert facts["VERSION"] == "1.2.4"


def test_source_facts_outside_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    assert context.source_facts(tmp_path) == {
        "REVISION": "", "SOURCE_DATE_EPOCH": "0", "CREATED": "1970-01-01T00:00:00Z", "VERSION": "",
    }  # fmt: skip
