"""containers/imagebuild/images.py: `nox -s image` options, build arguments and commands."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from containers.imagebuild import images, locks
from containers.imagebuild.images import ImageBuild
from tests.containers.imagebuild.fakes import FakeSession, SessionError
from tests.containers.recipes import read_dockerfile

FACTS = {"REVISION": "abc", "SOURCE_DATE_EPOCH": "1", "CREATED": "x", "VERSION": "0.1.0"}


@pytest.mark.parametrize(
    ("posargs", "flavour", "torch", "tag"),
    [
        (["cpu"], "cpu", "cpu", "ddpimg:cpu"),
        (["gpu"], "gpu", "pypi", "ddpimg:gpu"),
        (["gpu", "--torch", "pypi-cu128"], "gpu", "pypi-cu128", "ddpimg:gpu-cu128"),
        (["gpu", "--torch", "pypi-arm64"], "gpu", "pypi-arm64", "ddpimg:gpu-arm64"),
        (["cpu", "--torch", "pypi"], "cpu", "pypi", "ddpimg:cpu"),
        (["cpu", "--tag", "me/x:1"], "cpu", "cpu", "me/x:1"),
    ],
)
def test_parse_image_options(posargs: list[str], flavour: str, torch: str, tag: str) -> None:
    build = images.parse_image_options(posargs)
    assert (build.flavour, build.torch, build.tag) == (flavour, torch, tag)


def test_parse_image_options_reads_every_option(tmp_path: Path) -> None:
    build = images.parse_image_options(
        ["gpu", "--local", "--no-cache", "--ds-build-ops", "devel:1", "--cuda-arch-list", "9.0",
         "--mpi4py-wheel", "--extra-ca", str(tmp_path / "ca.pem")]
    )  # fmt: skip
    assert build == ImageBuild(
        "gpu", "ddpimg:gpu", "pypi", local=True, no_cache=True, ds_build_ops="devel:1",
        cuda_arch_list="9.0", mpi4py_wheel=True, extra_ca=tmp_path / "ca.pem",
    )  # fmt: skip


def test_parse_image_options_rejects_an_unknown_lock() -> None:
    with pytest.raises(SystemExit):
        images.parse_image_options(["gpu", "--torch", "nope"])


def test_build_args_of_a_plain_build() -> None:
    args = images.build_args(ImageBuild("gpu", "ddpimg:gpu", "pypi"), FACTS)
    assert args == FACTS | {
        "FLAVOUR": "gpu",
        "TORCH_SOURCE": "pypi",
        "APT_LOCK": "cuda13-ubuntu24.04",
    }


def test_the_cuda12_lock_takes_its_base_for_the_gpu_flavour_only() -> None:
    gpu = images.build_args(ImageBuild("gpu", "t", "pypi-cu128"), FACTS)
    cpu = images.build_args(ImageBuild("cpu", "t", "pypi-cu128"), FACTS)
    assert gpu["GPU_BASE"] == locks.CUDA_12_8_BASE
    assert "GPU_BASE" not in cpu


def test_a_local_build_takes_the_local_base_and_the_wheel_server() -> None:
    build = dataclasses.replace(images.CUDA12_BUILD, ds_build_ops="devel:1", cuda_arch_list="9.0")
    args = images.build_args(build, FACTS, wheels_url="http://127.0.0.1:1/")
    assert args["GPU_BASE"] == args["CPU_BASE"] == images.LOCAL_BASE
    assert args["WHEELS_URL"] == "http://127.0.0.1:1/"
    assert args["MPI4PY_BUILD"] == "wheel"
    assert (args["DS_BUILD_OPS"], args["BUILD_FROM"]) == ("1", "devel:1")
    assert args["TORCH_CUDA_ARCH_LIST"] == "9.0"


def test_a_local_arm64_build_on_x86_64_builds_the_venv_on_this_machines_base() -> None:
    args = images.build_args(images.ARM64_BUILD, FACTS, "http://127.0.0.1:1/", "x86_64")
    assert args["GPU_BASE"] == "ddpimg-base:bookworm-arm64"  # the image: arm64, emulated
    assert args["BUILD_FROM"] == images.LOCAL_BASE  # its venv: built at x86-64 speed
    assert args["CROSS_PLATFORM"] == "linux-aarch64"
    assert args["MPI4PY_BUILD"] == "wheel"


def test_a_local_arm64_build_on_aarch64_is_a_plain_one() -> None:
    args = images.build_args(images.ARM64_BUILD, FACTS, "http://127.0.0.1:1/", "aarch64")
    assert args["GPU_BASE"] == "ddpimg-base:bookworm-arm64"
    assert "CROSS_PLATFORM" not in args
    assert "BUILD_FROM" not in args


def test_every_build_arg_is_declared_in_the_dockerfile() -> None:
    declared = {i.args.partition("=")[0] for i in read_dockerfile() if i.keyword == "ARG"}
    build = ImageBuild(
        "gpu", "t", "pypi-cu128", ds_build_ops="d", cuda_arch_list="9.0", mpi4py_wheel=True
    )
    local = dataclasses.replace(build, local=True)
    passed = set(images.build_args(build, FACTS)) | set(images.build_args(local, FACTS, "u"))
    passed |= set(images.build_args(images.ARM64_BUILD, FACTS, "u", "x86_64"))
    assert passed <= declared


def test_docker_commands_build_the_stage_then_the_layered_image(tmp_path: Path) -> None:
    build = ImageBuild("cpu", "ddpimg:cpu", "pypi", local=True, no_cache=True)
    first, second = images.docker_commands(build, tmp_path, {"B": "2", "A": "1"})
    common = [
        "docker", "build", "--file", str(tmp_path / "containers" / "Dockerfile"),
        "--network", "host", "--build-arg", "A=1", "--build-arg", "B=2",
    ]  # fmt: skip
    assert first == [*common, "--no-cache", "--target", "build", "--tag", "ddpimg:cpu-build",
                     str(tmp_path)]  # fmt: skip
    # ddpimg:cpu itself is the reproducible image made from this one (reproduce.normalise).
    assert second == [*common, "--tag", "ddpimg:cpu-layers", str(tmp_path)]


def test_docker_commands_without_a_local_registry_use_the_default_network(tmp_path: Path) -> None:
    for command in images.docker_commands(ImageBuild("gpu", "t", "pypi"), tmp_path, {}):
        assert "--network" not in command
        assert "--no-cache" not in command


@pytest.mark.parametrize(
    ("local", "machine", "platform"),
    [
        (False, "x86_64", "linux/arm64"),  # every step emulated, the bases pulled for arm64
        (True, "x86_64", None),  # the local bases carry their platforms
        (False, "aarch64", None),  # native
        (True, "aarch64", None),
    ],
)
def test_docker_commands_name_the_platform_of_an_emulated_build(
    tmp_path: Path, local: bool, machine: str, platform: str | None
) -> None:
    build = dataclasses.replace(images.ARM64_BUILD, local=local)
    for command in images.docker_commands(build, tmp_path, {}, machine):
        named = command[command.index("--platform") + 1] if "--platform" in command else None
        assert named == platform


@pytest.mark.parametrize(
    "build",
    [
        images.SMOKE_BUILD,
        images.CUDA13_BUILD,
        images.CUDA12_BUILD,
        images.ARM64_BUILD,
        *images.BENCH_BUILDS,
    ],
    ids=str,
)
def test_the_builds_ci_makes_have_their_lock(build: ImageBuild) -> None:
    assert locks.missing_lock(build.torch) is None


def test_ci_smokes_the_cpu_flavour_from_its_own_lock() -> None:
    """The smoke image is the small one a laptop gets: torch's CPU build, not the CUDA one."""
    assert (images.SMOKE_BUILD.flavour, images.SMOKE_BUILD.torch) == ("cpu", locks.CPU_LOCK)
    assert {build.torch for build in images.BENCH_BUILDS} == {"cpu", "pypi"}


def test_build_image_stops_before_docker_without_the_lock(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(locks.LOCKS, "nope", locks.Lock())
    with pytest.raises(SessionError, match=r"containers/lock/nope\.txt does not exist"):
        images.build_image(session, ImageBuild("cpu", "t", "nope", local=True))
    assert not session.runs


def test_an_arm64_build_here_cannot_prebuild_deepspeeds_ops(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "host_machine", lambda: "x86_64")
    build = dataclasses.replace(images.ARM64_BUILD, ds_build_ops="nvidia/cuda:13.0.3-devel")
    with pytest.raises(SessionError, match="DeepSpeed's ops cannot be compiled for aarch64"):
        images.build_image(session, build)
    assert not session.runs


def test_build_inputs_change_with_a_file_an_argument_or_a_base_not_the_wheel_server(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    args = {"FLAVOUR": "cpu", "WHEELS_URL": "http://127.0.0.1:38751/"}
    first = images.build_inputs(tmp_path, args, ["sha256:base"])
    other_port = args | {"WHEELS_URL": "http://127.0.0.1:40000/"}
    assert images.build_inputs(tmp_path, other_port, ["sha256:base"]) == first
    assert images.build_inputs(tmp_path, args | {"FLAVOUR": "gpu"}, ["sha256:base"]) != first
    assert images.build_inputs(tmp_path, args, ["sha256:newer"]) != first
    (tmp_path / "src" / "a.py").write_text("x = 2\n")
    assert images.build_inputs(tmp_path, args, ["sha256:base"]) != first


def test_an_image_is_kept_only_while_the_tag_names_what_was_built_from_those_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "built.json"
    ids = {"ddpimg:cpu": "sha256:one"}
    monkeypatch.setattr(images, "image_id", ids.get)
    assert images.built_from("ddpimg:cpu", "inputs", record) is None  # no record yet
    images.record_build("ddpimg:cpu", "inputs", record)
    assert images.built_from("ddpimg:cpu", "inputs", record) == "sha256:one"
    assert images.built_from("ddpimg:cpu", "other inputs", record) is None
    ids["ddpimg:cpu"] = "sha256:rebuilt elsewhere"
    assert images.built_from("ddpimg:cpu", "inputs", record) is None
    del ids["ddpimg:cpu"]
    assert images.built_from("ddpimg:cpu", "inputs", record) is None


def test_a_rebuild_removes_only_the_images_its_tags_named_before(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = {"t": "sha256:new", "t-build": "sha256:same"}
    monkeypatch.setattr(images, "image_id", now.get)
    images.drop_replaced(session, {"t": "sha256:old", "t-build": "sha256:same", "t-layers": None})
    assert session.runs == [["sh", "-c", "docker image rm sha256:old >/dev/null 2>&1 || true"]]
    assert not [run for run in session.runs if "prune" in run]


def _repro(
    session: FakeSession,
    monkeypatch: pytest.MonkeyPatch,
    ids: dict[str, str],
    lines: list[str],
    posargs: list[str],
) -> list[images.ImageBuild]:
    built: list[images.ImageBuild] = []
    copies: list[tuple[Path, bool]] = []

    def build_image(
        session: FakeSession, build: images.ImageBuild, facts: object, sources: Path
    ) -> None:
        copies.append((sources, (sources / "src" / "ddpimg" / "__init__.py").is_file()))
        built.append(build)

    monkeypatch.setattr(images, "build_image", build_image)
    monkeypatch.setattr(images, "image_id", ids.get)
    monkeypatch.setattr(images, "compare_images", lambda a, b: lines)
    images.check_reproducible(session, posargs)
    # Both from one copy of the sources taken before the first: an edit in the checkout
    # while they run is neither's.
    ((first, whole), (second, _)) = copies
    assert first == second != Path()
    assert whole
    assert not first.exists()  # removed afterwards
    return built


def test_image_repro_builds_twice_the_second_without_cache_and_compares_digests(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = {"ddpimg:cpu": "sha256:a", "ddpimg:cpu-repro": "sha256:a"}
    built = _repro(session, monkeypatch, ids, [], [])
    assert built == [
        images.SMOKE_BUILD,
        dataclasses.replace(
            images.SMOKE_BUILD, tag="ddpimg:cpu-repro", no_cache=True, drop_caches=True
        ),
    ]
    assert session.logs[-1] == "ddpimg:cpu and a --no-cache rebuild have one digest: sha256:a"
    assert ["docker", "image", "rm", "ddpimg:cpu-repro"] in session.runs


def test_image_repro_takes_the_image_options(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = {"me:gpu": "sha256:a", "me:gpu-repro": "sha256:a"}
    posargs = ["gpu", "--local", "--drop-caches", "--tag", "me:gpu"]
    first, second = _repro(session, monkeypatch, ids, [], posargs)
    assert (first.flavour, first.local, first.drop_caches, first.no_cache) == (
        "gpu", True, True, False
    )  # fmt: skip
    assert (second.tag, second.no_cache) == ("me:gpu-repro", True)


def test_image_repro_lists_the_differing_files_and_fails(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [f"content differ: /f{i}" for i in range(images.REPRO_LINES + 5)]
    ids = {"ddpimg:cpu": "sha256:a", "ddpimg:cpu-repro": "sha256:b"}
    with pytest.raises(SessionError) as failed:
        _repro(session, monkeypatch, ids, lines, [])
    message = str(failed.value)
    assert "ddpimg:cpu is sha256:a, ddpimg:cpu-repro (kept for a look" in message
    assert f"{len(lines)} differences:\ncontent differ: /f0" in message
    assert message.endswith("... and 5 more")
