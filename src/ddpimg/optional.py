"""The optional packages ddpimg imports where it uses them, and the extra that installs
each: a missing one is a user error (exit status 2) that names both, not a traceback."""

from __future__ import annotations

from ddpimg.errors import DdpimgError

# top-level module -> (the package to install, ddpimg's extra that brings it)
PACKAGES: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "numpy": ("numpy", "train"),
    "torchvision": ("torchvision", "vision"),
    "PIL": ("pillow", "vision"),
    "simplejpeg": ("simplejpeg", "train"),
    "tiktoken": ("tiktoken", "text"),
    "safetensors": ("safetensors", "hf"),
    "deepspeed": ("deepspeed", "deepspeed"),
    "mpi4py": ("mpi4py", "mpi"),
    "matplotlib": ("matplotlib", "plot"),
}


def missing_package(err: BaseException) -> DdpimgError | None:
    """The user error for ``err`` when it is the import of an optional package failing;
    None for anything else (a missing module of ddpimg itself is a bug, not a user error)."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    top = err.name.split(".")[0]
    if top not in PACKAGES:
        return None
    package, extra = PACKAGES[top]
    return DdpimgError(
        f"this needs the Python package {package}, which is not installed ({err})",
        hint=f"pip install 'ddpimg[{extra}]' (or pip install {package}), or run inside the "
        "ddpimg image, which has every extra",
    )
