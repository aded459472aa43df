"""`nox -s sif`: a SIF from the Docker image (ddp.def) or by Apptainer alone
(ddp-standalone.def), named after the image or the lock.

Reproducible with Apptainer >= 1.5.0, which builds a deterministic SIF when
SOURCE_DATE_EPOCH is set (its CHANGELOG, v1.5.0): the SIF's UUID is nil, the build-date
labels and the squashfs times are the epoch. The build runs with the last commit's epoch
(the Docker image's ``created`` time, which `nox -s image` sets to it) and TZ=UTC, because
Apptainer writes the ``org.label-schema.build-date`` label in the build host's time zone
(internal/pkg/build/metadata.go). docs/containers.md lists what else must be the same."""

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
    source_date_epoch: str = ""  # the last commit's date: a deterministic SIF (Apptainer >= 1.5)


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
        return SifBuild(
            CONTAINERS / "ddp-standalone.def",
            names.sif,
            tuple(build_args),
            source_date_epoch=facts["SOURCE_DATE_EPOCH"],
        )
    # ddp.def from the image `nox -s image -- KIND --torch LOCK` tagged.
    return SifBuild(
        CONTAINERS / "ddp.def",
        names.sif,
        (f"IMAGE={names.tag}",),
        ns.kind == "cpu",
        source_date_epoch=facts["SOURCE_DATE_EPOCH"],
    )


def sif_env(sif: SifBuild) -> dict[str, str]:
    """The environment of `apptainer build`: SOURCE_DATE_EPOCH and TZ=UTC for a
    deterministic SIF (module docstring)."""
    if not sif.source_date_epoch:
        return {}
    return {"SOURCE_DATE_EPOCH": sif.source_date_epoch, "TZ": "UTC"}


def build_sif(session: Session, apptainer: str, sif: SifBuild) -> None:
    """`apptainer build` ``sif``, then `apptainer test` it."""
    with tempfile.TemporaryDirectory() as tmp:
        recipe = sif.recipe
        if sif.cpu_title:
            text = recipe.read_text(encoding="utf-8").replace("ddpimg (gpu)", "ddpimg (cpu)")
            recipe = Path(tmp) / recipe.name
            recipe.write_text(text, encoding="utf-8")
        options = [word for arg in sif.build_args for word in ("--build-arg", arg)]
        session.run(
            apptainer, "build", "--force", *options, sif.output, str(recipe),
            env=sif_env(sif), external=True,
        )  # fmt: skip
    session.run(apptainer, "test", sif.output, external=True)
