"""`nox -s sif`: a SIF from the Docker image (ddp.def) or by Apptainer alone
(ddp-standalone.def), named after the image or the lock."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddpimg.imagenames import image_names

from .locks import CONTAINERS, DEFAULT_LOCK, LOCKS, variant
from .session import Session


@dataclasses.dataclass(frozen=True)
class SifBuild:
    recipe: Path
    output: str
    build_args: tuple[str, ...]  # NAME=VALUE for --build-arg
    cpu_title: bool = False  # ddp.def for the cpu image: only its title names the flavour


def parse_sif_options(posargs: Sequence[str], facts: Mapping[str, str]) -> SifBuild:
    """The SIF `nox -s sif -- POSARGS` builds; ``facts``: context.source_facts()."""
    parser = argparse.ArgumentParser(prog="nox -s sif --", allow_abbrev=False)
    parser.add_argument("kind", nargs="?", default="gpu", choices=["gpu", "cpu", "standalone"])
    parser.add_argument("--torch", choices=sorted(LOCKS), help=f"lock (default: {DEFAULT_LOCK})")
    ns = parser.parse_args(list(posargs))
    lock = LOCKS[ns.torch or DEFAULT_LOCK]
    names = image_names(ns.kind, variant(ns.torch or DEFAULT_LOCK))
    if ns.kind == "standalone":
        build_args = [
            f"REVISION={facts['REVISION']}",
            f"SOURCE_DATE_EPOCH={facts['SOURCE_DATE_EPOCH']}",
        ]
        if ns.torch:  # the .def's defaults are DEFAULT_LOCK's
            build_args.append(f"TORCH_SOURCE={ns.torch}")
        if lock.gpu_base is not None:
            build_args.append(f"GPU_BASE={lock.gpu_base}")
        return SifBuild(CONTAINERS / "ddp-standalone.def", names.sif, tuple(build_args))
    # ddp.def from the image `nox -s image -- KIND --torch LOCK` tagged.
    return SifBuild(CONTAINERS / "ddp.def", names.sif, (f"IMAGE={names.tag}",), ns.kind == "cpu")


def build_sif(session: Session, apptainer: str, sif: SifBuild) -> None:
    """`apptainer build` ``sif``, then `apptainer test` it."""
    with tempfile.TemporaryDirectory() as tmp:
        recipe = sif.recipe
        if sif.cpu_title:
            text = recipe.read_text(encoding="utf-8").replace("ddpimg (gpu)", "ddpimg (cpu)")
            recipe = Path(tmp) / recipe.name
            recipe.write_text(text, encoding="utf-8")
        options = [word for arg in sif.build_args for word in ("--build-arg", arg)]
        session.run(apptainer, "build", "--force", *options, sif.output, str(recipe), external=True)
    session.run(apptainer, "test", sif.output, external=True)
