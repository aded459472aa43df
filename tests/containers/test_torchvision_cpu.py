"""containers/scripts/torchvision_cpu.py: PyPI's (CUDA) torchvision made importable beside
torch's CPU build, in the cpu image's build stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.containers.recipes import load_script

torchvision_cpu = load_script("torchvision_cpu")

# The shape of torchvision 0.28.0's _meta_registrations.py: guarded registrations through
# register_meta, and the two unguarded fake kernels (pytorch/vision#9085).
META = """import torchvision.extension  # noqa: F401


@register_meta("roi_align")
def meta_roi_align(input, rois):
    return input.new_empty(())


@torch.library.register_fake("torchvision::nms")
def meta_nms(dets, scores, iou_threshold):
    torch._check(dets.dim() == 2, lambda: "2d")

    ctx = torch._custom_ops.get_ctx()
    return dets.new_empty(ctx.create_unbacked_symint(), dtype=torch.long)


@torch.library.register_fake("torchvision::qnms")
def meta_qnms(dets, scores, iou_threshold):
    return dets.new_empty(0)


@register_meta("ps_roi_align")
def meta_ps_roi_align(input):
    return input
"""


def _namespace() -> dict[str, object]:
    """What the patched module sees: an extension without ops, recording registrations."""
    registered: list[str] = []

    class Library:
        @staticmethod
        def register_fake(op: str):  # type: ignore[no-untyped-def]
            registered.append(op)
            return lambda fn: fn

    class Torch:
        library = Library

    class Extension:
        has = False

        @classmethod
        def _has_ops(cls) -> bool:
            return cls.has

    class Torchvision:
        extension = Extension

    return {
        "torch": Torch,
        "torchvision": Torchvision,
        "register_meta": lambda name: lambda fn: fn,
        "registered": registered,
    }


def _run(source: str, has_ops: bool) -> list[str]:
    namespace = _namespace()
    namespace["torchvision"].extension.has = has_ops  # type: ignore[attr-defined]
    body = source.split("\n", 1)[1]  # the import line aside: the namespace provides it
    exec(compile(body, "_meta_registrations.py", "exec"), namespace)
    return namespace["registered"]  # type: ignore[return-value]


def test_the_fake_kernels_register_only_where_the_ops_loaded() -> None:
    patched = torchvision_cpu.guard_fake_kernels(META)
    assert _run(META, has_ops=False) == ["torchvision::nms", "torchvision::qnms"]
    assert _run(patched, has_ops=False) == []
    assert _run(patched, has_ops=True) == ["torchvision::nms", "torchvision::qnms"]


def test_the_guard_keeps_each_function_whole_and_nothing_else_moves() -> None:
    patched = torchvision_cpu.guard_fake_kernels(META)
    assert patched.count(torchvision_cpu.GUARD) == 2
    assert '\n    @torch.library.register_fake("torchvision::nms")\n' in patched
    # The blank line inside meta_nms stays inside the guarded block, its last line indented.
    assert "\n        return dets.new_empty(ctx.create_unbacked_symint()" in patched
    assert '\n@register_meta("ps_roi_align")\ndef meta_ps_roi_align(input):\n' in patched
    unguarded = [line for line in META.splitlines() if "register_fake" not in line]
    assert all(line.strip() in patched for line in unguarded)


def test_patching_twice_changes_nothing_more() -> None:
    once = torchvision_cpu.guard_fake_kernels(META)
    assert torchvision_cpu.guard_fake_kernels(once) == once


def test_another_torchvision_is_refused() -> None:
    other = META.replace('register_fake("torchvision::qnms")', 'register_fake("torchvision::x")')
    with pytest.raises(torchvision_cpu.PatchError, match="torchvision::qnms"):
        torchvision_cpu.guard_fake_kernels(other)


def test_strip_compiled_removes_the_ops_and_their_libraries(tmp_path: Path) -> None:
    package = tmp_path / "torchvision"
    (package / "ops").mkdir(parents=True)
    for name in ("_C.so", "image.so", "__init__.py", "ops/boxes.py"):
        (package / name).write_text("")
    (tmp_path / "torchvision.libs").mkdir()
    (tmp_path / "torchvision.libs" / "libcudart.faf08d9a.so.13").write_text("")
    removed = torchvision_cpu.strip_compiled(package)
    assert sorted(path.name for path in removed) == ["_C.so", "image.so", "torchvision.libs"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "__init__.py", "boxes.py", "ops", "torchvision",
    ]  # fmt: skip
    assert torchvision_cpu.strip_compiled(package) == []
