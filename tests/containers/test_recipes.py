"""The Docker image and the Apptainer images are one image: same environment, same entry
command, same scripts; nothing site-specific baked in. Static checks of the recipes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.containers.recipes import (
    CONTAINERS,
    DEFS,
    ROOT,
    Definition,
    dockerfile_env,
    dockerfile_json,
    dockerfile_labels,
    global_args,
    key_values,
    read_arguments,
    read_definition,
    read_dockerfile,
)

INSTRUCTIONS = read_dockerfile()
VENV_BIN = "/opt/ddpimg/venv/bin"
# Site-specific settings belong to the site profiles, applied at run time: under Apptainer a
# value baked into the image cannot be overridden from the host.
SITE_VARIABLES = re.compile(
    r"^(NCCL_|GLOO_|UCX_|OMPI_MCA_|PMIX_MCA_|FI_|MASTER_(ADDR|PORT)$|DDPIMG_SITE)"
)


@pytest.fixture(scope="module", params=sorted(DEFS))
def definition(request: pytest.FixtureRequest) -> Definition:
    return read_definition(DEFS[request.param])


def test_def_environment_is_the_docker_env(definition: Definition) -> None:
    assert definition.environment == dockerfile_env(INSTRUCTIONS)


@pytest.mark.parametrize(
    ("name", "value"), [("PYTHONNOUSERSITE", "1"), ("LANG", "C.UTF-8")]
)  # fmt: skip
def test_docker_env_sets(name: str, value: str) -> None:
    assert dockerfile_env(INSTRUCTIONS)[name] == value


def test_image_commands_come_first_on_path() -> None:
    path = dockerfile_env(INSTRUCTIONS)["PATH"].split(":")
    assert path[0] == VENV_BIN
    # install-python.sh puts entrypoints/{train,ddpimg} there, over pip's console scripts.
    script = (CONTAINERS / "scripts" / "install-python.sh").read_text(encoding="utf-8")
    assert "venv=${VENV:-/opt/ddpimg/venv}" in script
    assert 'install -m 0755 "$entrypoints/$command" "$venv/bin/$command"' in script


@pytest.mark.parametrize("source", ["Dockerfile", *sorted(DEFS)])
def test_no_site_variables_baked_in(source: str) -> None:
    if source == "Dockerfile":
        names = set(dockerfile_env(INSTRUCTIONS))
    else:
        names = set(read_definition(DEFS[source]).environment)
    assert not {n for n in names if SITE_VARIABLES.match(n)}


def test_runscript_and_docker_command_run_train(definition: Definition) -> None:
    assert definition.runscript == 'exec train "$@"'
    assert dockerfile_json(INSTRUCTIONS, "CMD")[0] == "train"
    # tini forwards signals to train and reaps torchrun's workers; it adds no command.
    assert dockerfile_json(INSTRUCTIONS, "ENTRYPOINT") == ["/usr/bin/tini", "--"]


@pytest.mark.parametrize("command", ["train", "ddpimg"])
def test_entrypoints_isolate_the_first_interpreter(command: str) -> None:
    text = (ROOT / "entrypoints" / command).read_text(encoding="utf-8")
    exec_lines = [line for line in text.splitlines() if line.startswith("exec ")]
    assert exec_lines, f"entrypoints/{command} has no exec line"
    assert exec_lines[0].startswith("exec python3 -I -m ddpimg")


def test_def_test_section_runs_the_selfcheck(definition: Definition) -> None:
    assert any("sh /opt/ddpimg/scripts/selfcheck.sh" in line for line in definition.test_lines)


def test_def_labels_match_the_docker_labels(definition: Definition) -> None:
    docker = {
        name: value.replace("${FLAVOUR}", "gpu")
        for name, value in dockerfile_labels(INSTRUCTIONS).items()
    }
    assert definition.labels
    for name, value in definition.labels.items():
        assert name.startswith("org.opencontainers.image.")
        assert docker[name] == value, name


def test_docker_labels_are_oci() -> None:
    labels = dockerfile_labels(INSTRUCTIONS)
    expected = {"title", "description", "version", "revision", "created", "licenses", "source"}
    assert {name.removeprefix("org.opencontainers.image.") for name in labels} == expected


def test_docker_daemon_def_builds_from_the_docker_image() -> None:
    """ddpimg:gpu by default; `--build-arg IMAGE=ddpimg:gpu-cu128` for the CUDA 12.8 one."""
    recipe = read_definition(DEFS["ddp.def"])
    assert (recipe.bootstrap, recipe.from_) == ("docker-daemon", "{{ IMAGE }}")
    assert recipe.resolve(recipe.from_) == "ddpimg:gpu"


def test_standalone_def_uses_the_dockerfile_cuda_base() -> None:
    recipe = read_definition(DEFS["ddp-standalone.def"])
    gpu_base = global_args(INSTRUCTIONS)["GPU_BASE"]
    assert recipe.bootstrap == "docker"
    assert re.search(r"@sha256:[0-9a-f]{64}$", gpu_base)
    # Read from the file as written (spython lower-cases From); the digest must match exactly.
    assert recipe.from_ == "{{ GPU_BASE }}"
    assert recipe.resolve(recipe.from_) == gpu_base
    # build-info.json records the base the build really used, the argument's value.
    assert any('--base-image "{{ GPU_BASE }}"' in line for line in recipe.post)
    assert recipe.arguments["TORCH_SOURCE"] == "pypi"


def test_resolve_needs_a_default_for_every_placeholder() -> None:
    recipe = read_definition(DEFS["ddp.def"])
    with pytest.raises(ValueError, match="NOPE"):
        recipe.resolve("{{ NOPE }}")


def test_read_arguments_reads_only_its_section() -> None:
    text = "Bootstrap: docker\n%arguments\n    A=1\n    # B=2\n%post\n    C=3\n"
    assert read_arguments(text) == {"A": "1"}


def test_standalone_def_runs_the_same_install_scripts() -> None:
    recipe = read_definition(DEFS["ddp-standalone.def"])
    post = "\n".join(recipe.post)
    for step in (
        "install-system.sh build",
        "install-python.sh deps",
        "install-python.sh compile",
        "install-python.sh ddpimg",
        "build_info.py",
        "--tree-listing /etc/ddpimg/tree.txt",
    ):
        assert step in post, step
    for source, _ in recipe.files:
        assert (ROOT / source).exists(), f"%files names {source}, which does not exist"


def test_dockerfile_runs_the_same_install_scripts() -> None:
    runs = "\n".join(i.args for i in INSTRUCTIONS if i.keyword == "RUN")
    for step in (
        "install-system.sh runtime",
        "install-system.sh build",
        "install-python.sh deps",
        "install-python.sh compile",
        "install-python.sh ddpimg",
        "build_info.py",
        "--tree-listing /etc/ddpimg/tree.txt",
        "selfcheck.sh",
    ):
        assert step in runs, step


def test_build_inputs_stay_in_the_build_stage() -> None:
    """Wheel sources and CA bundles are ARGs/COPYs of the build stage only."""
    last = max(i.stage for i in INSTRUCTIONS)
    final = [i for i in INSTRUCTIONS if i.stage == last]
    final_args = {i.args.partition("=")[0] for i in final if i.keyword == "ARG"}
    assert not final_args & {"WHEELS_URL", "INDEX_URL"}
    assert not [i for i in final if "build-inputs" in i.args]
    copies = [i.args for i in final if i.keyword == "COPY"]
    # The Debian locks go to /tmp, which the last RUN empties (the build record names the one
    # used and its SHA-256).
    assert {c for c in copies if not c.startswith("--from=build ")} == {
        "containers/scripts/ /opt/ddpimg/scripts/",
        "containers/lock/apt/ /tmp/ddpimg-build/apt/",
    }
    assert not [c for c in copies if "inputs" in c]


def test_the_default_user_is_not_root() -> None:
    users = [i.args for i in INSTRUCTIONS if i.keyword == "USER"]
    assert users == ["ddp"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("A=1", {"A": "1"}),
        ('A=1 B="x y"', {"A": "1", "B": "x y"}),
        ('title="ddpimg (${FLAVOUR})"', {"title": "ddpimg (${FLAVOUR})"}),
    ],
)  # fmt: skip
def test_key_values(args: str, expected: dict[str, str]) -> None:
    assert key_values(args) == expected


def test_key_values_rejects_a_bare_word() -> None:
    with pytest.raises(ValueError, match="expected NAME=VALUE, found 'A' in 'A B=1'"):
        key_values("A B=1")


def test_read_dockerfile_rejects_a_dangling_continuation(tmp_path: Path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text("FROM x\nRUN true \\\n")
    with pytest.raises(ValueError, match="ends inside a continued line"):
        read_dockerfile(path)
