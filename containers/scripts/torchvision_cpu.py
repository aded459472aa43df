"""Make PyPI's torchvision importable beside a CPU-only torch (the cpu image's build stage).

PyPI has only CUDA builds of torchvision, and no source distribution. Its compiled ops
(``torchvision/_C.so``, ``torchvision/image.so``) are linked against torch's CUDA libraries
(``libtorch_cuda.so``, ``libc10_cuda.so``) and bundle CUDA's runtime and nvJPEG in
``torchvision.libs/``: beside torch's CPU build they cannot load. torchvision is made to work
without them (``torchvision.extension._has_ops()`` is then False, and each op raises its own
"Couldn't load custom C++ ops" error), except that 0.28.0 registers two fake kernels without
that guard, so ``import torchvision`` fails with "operator torchvision::nms does not exist"
(pytorch/vision#9085). This script

1. removes the compiled ops and the libraries only they load, and
2. puts those two registrations under the same guard as the others, as torchvision's own fix
   does (pytorch/vision#9086),

then checks the result. What stays: the models, transforms, datasets, ``StochasticDepth``
and the other pure-Python ops; what goes: the compiled ops (``nms``, ``roi_align``,
``deform_conv2d``, ...) and ``torchvision.io``'s image and video decoders. ddpimg uses the
models and ``StochasticDepth``, and decodes images with PIL / simplejpeg.

    python torchvision_cpu.py SITE_PACKAGES
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

COMPILED = ("_C.so", "image.so")
LIBS = "torchvision.libs"
GUARDED = ("torchvision::nms", "torchvision::qnms")
GUARD = "if torchvision.extension._has_ops():\n"


class PatchError(RuntimeError):
    """The torchvision found is not the one this patch was written for."""


def guard_fake_kernels(source: str, ops: tuple[str, ...] = GUARDED) -> str:
    """``source`` (torchvision/_meta_registrations.py) with each unguarded
    ``@torch.library.register_fake(OP)`` function of ``ops`` indented under GUARD. A function
    ends at the first line after it that is neither blank nor indented."""
    lines = source.splitlines(keepends=True)
    for op in ops:
        decorator = f'@torch.library.register_fake("{op}")\n'
        if decorator not in lines:
            indented = f"    {decorator}"
            if indented in lines and lines[lines.index(indented) - 1] == GUARD:
                continue  # guarded already (patched before, or a fixed torchvision)
            raise PatchError(f"{op}: no registration {decorator.strip()!r}")
        start = lines.index(decorator)
        end = start + 2  # the decorator, the def line, then its body
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        # Trailing blank lines stay outside the block.
        while not lines[end - 1].strip():
            end -= 1
        body = [f"    {line}" if line.strip() else line for line in lines[start:end]]
        lines[start:end] = [GUARD, *body]
    return "".join(lines)


def strip_compiled(package: Path) -> list[Path]:
    """Remove torchvision's compiled ops and its bundled libraries; those removed."""
    removed = []
    for name in COMPILED:
        path = package / name
        if path.exists():
            path.unlink()
            removed.append(path)
    libs = package.parent / LIBS
    if libs.is_dir():
        shutil.rmtree(libs)
        removed.append(libs)
    return removed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    package = Path(argv[0]) / "torchvision"
    meta = package / "_meta_registrations.py"
    try:
        meta.write_text(guard_fake_kernels(meta.read_text()))
    except (OSError, PatchError) as err:
        print(f"torchvision_cpu.py: error: {err}", file=sys.stderr)
        print("torchvision_cpu.py: hint: written for torchvision 0.28.0", file=sys.stderr)
        return 1
    for path in strip_compiled(package):
        print(f"torchvision_cpu.py: removed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
