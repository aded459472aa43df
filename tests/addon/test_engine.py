"""``--image``'s container command and the host's pip settings it passes in
(ddpimg.addon.engine), and ``ddpimg addon image``'s Dockerfile (ddpimg.addon.layered)."""

from __future__ import annotations

from pathlib import Path

from ddpimg.addon.engine import HOST_PREFIX, Binds, container_command, host_pip_settings
from ddpimg.addon.layered import default_tag, dockerfile


def test_the_hosts_effective_pip_settings_become_variables_with_their_paths_bound(
    tmp_path: Path,
) -> None:
    index = tmp_path / "pypi" / "simple"
    index.mkdir(parents=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cert = Path("/etc/hostname")  # a file in a directory the image has its own of
    listing = "\n".join(
        [
            ":env:.find-links='https://wheels.example/'",
            f"global.find-links='{wheels}'",
            f"global.extra-index-url='file://{index} https://mirror.example/simple'",
            f"global.cert='{cert}'",
            "global.constraint='/etc/xdg/pip/constraints.txt'",
            "install.index-url='https://proxy.example/simple'",
            "global.index-url='https://ignored.example/simple'",
            "global.trusted-host='proxy.example'",
        ]
    )
    binds = Binds()
    env = host_pip_settings(listing, {"HTTPS_PROXY": "http://127.0.0.1:3128"}, binds)
    assert env == {
        # A PIP_ variable over the install section over [global], as pip decides.
        "PIP_FIND_LINKS": "https://wheels.example/",
        "PIP_INDEX_URL": "https://proxy.example/simple",
        # A file:// index is bound with the directory above it, where its files lie.
        "PIP_EXTRA_INDEX_URL": f"file://{index} https://mirror.example/simple",
        "PIP_CERT": f"{HOST_PREFIX}/etc/hostname",
        "PIP_TRUSTED_HOST": "proxy.example",
        "HTTPS_PROXY": "http://127.0.0.1:3128",
    }
    assert binds.items() == [
        ("/etc/hostname", f"{HOST_PREFIX}/etc/hostname", False),
        (str(tmp_path / "pypi"), str(tmp_path / "pypi"), False),
    ]


def test_docker_runs_the_build_as_the_caller_and_apptainer_with_a_clean_environment() -> None:
    binds = Binds()
    binds.add("/work/out", write=True)
    binds.add("/work/reqs")
    argv = ["ddpimg", "addon", "build", "-r", "/work/reqs/r.txt"]
    docker = container_command("docker", "ddpimg:cpu", binds, {"PIP_CERT": "/c"}, argv)
    assert docker[:4] == ["docker", "run", "--rm", "--network=host"]
    assert docker[4].startswith("--user=")
    assert docker[5] == "--env=HOME=/tmp"
    assert docker[6:] == [
        "--volume", "/work/out:/work/out", "--volume", "/work/reqs:/work/reqs:ro",
        "--env", "PIP_CERT=/c", "ddpimg:cpu", *argv,
    ]  # fmt: skip
    sif = container_command("apptainer", "ddp.sif", binds, {"PIP_CERT": "/c"}, argv)
    assert sif == [
        "apptainer", "exec", "--cleanenv", "--bind", "/work/out:/work/out",
        "--bind", "/work/reqs:/work/reqs:ro", "--env", "PIP_CERT=/c", "ddp.sif", *argv,
    ]  # fmt: skip
    podman = container_command("podman-hpc", "img", binds, {}, argv)
    assert "--user=0:0" in podman


def test_the_layered_image_unpacks_and_checks_in_a_stage_and_copies_one_layer_each() -> None:
    text = dockerfile("ddpimg:cpu", [("timm", "timm.addon.sqsh"), ("lab", "lab.addon.sqsh")],
                      "lab=" + "1" * 64 + ",timm=" + "2" * 64)  # fmt: skip
    lines = text.splitlines()
    assert lines[1] == "FROM ddpimg:cpu AS unpacked"
    assert "    && DDPIMG_ADDON_ROOT=/tmp/ddpimg-addons ddpimg addon check" in lines
    assert lines[-5:] == [
        "FROM ddpimg:cpu",
        "COPY --from=unpacked --chown=0:0 /tmp/ddpimg-addons/timm /opt/ddpimg/addons/timm",
        "COPY --from=unpacked --chown=0:0 /tmp/ddpimg-addons/lab /opt/ddpimg/addons/lab",
        f"ENV DDPIMG_ADDONS=lab={'1' * 64},timm={'2' * 64}",
        f'LABEL org.ddpimg.addons="lab={"1" * 64},timm={"2" * 64}"',
    ]
    assert default_tag("ddpimg:cpu", ["timm"]) == "ddpimg:cpu-timm"
    assert default_tag("localhost:5000/ddp", ["a", "b"]) == "localhost:5000/ddp:a-b"
