"""Crafted checkpoint files: pickles that create a marker file when they are unpickled, as
a file planted in a shared checkpoint could run any code on the account that loads it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch


class Planted:
    """Unpickled, this object calls ``open(marker, "w")``: the marker's existence proves
    that the loader ran code from the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def plant_torch_file(path: Path, marker: Path) -> None:
    """Replace ``path`` with a ``torch.save`` file whose unpickling creates ``marker``."""
    torch.save({"module": {}, "planted": Planted(marker)}, path)


def plant_pickle(path: Path, marker: Path) -> None:
    """Replace ``path`` with a plain pickle (as DCP's ``.metadata`` is) that creates
    ``marker``."""
    path.write_bytes(pickle.dumps(Planted(marker)))


def unrestricted_load_runs_code(tmp: Path, torch_format: bool) -> bool:
    """Whether a planted file, loaded without restriction (as the libraries did), creates
    its marker: the control that makes every "nothing ran" assertion able to fail."""
    marker = tmp / "control-marker"
    planted = tmp / "control.bin"
    if torch_format:
        plant_torch_file(planted, marker)
        torch.load(planted, weights_only=False)
    else:
        plant_pickle(planted, marker)
        pickle.loads(planted.read_bytes())
    return marker.exists()
