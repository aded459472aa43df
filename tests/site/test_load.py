"""Loading and strict validation of one site profile."""

from __future__ import annotations

import hashlib
import re
import warnings
from pathlib import Path

import pytest

from ddpimg.errors import ProfileError
from ddpimg.site.load import ProfileWarning, load_profile
from ddpimg.site.model import JobDefaults, MatchRule

from .conftest import WriteProfile

FULL = """\
[site]
name = "full"
description = "every key"

[match]
hostnames = ["gpu[0-9][0-9]", "login*"]
slurm_cluster_names = ["full"]
env = { ZMARK = "z*", AMARK = "a" }

[network]
interfaces = ["ib0", "ib1"]
master_addr = "{node}-ib"
port_range = [21000, 21999]
backend = "nccl"

[env]
NCCL_IB_HCA = "mlx5"
FI_PROVIDER = "cxi"

[clean]
remove = ["MYLAB_*"]
keep = ["FI_*"]

[job]
gpus_per_node = 4
gpu_type = "a100"
gpu_request = "gpus-per-node"
cpus_per_task = 16
partition = "gpu"
constraint = "gpu"
binds = ["/data", "/scratch"]
"""


def test_minimal_profile_gets_the_defaults(write_profile: WriteProfile) -> None:
    profile = load_profile(write_profile("mini"))
    assert profile.name == "mini"
    assert profile.description == ""
    assert profile.match == MatchRule()
    assert profile.interfaces == ()
    assert profile.master_addr == "{node}"
    assert profile.port_range == (20000, 29999)
    assert profile.backend == ""
    assert profile.exports == ()
    assert (profile.remove, profile.keep) == ((), ())
    assert profile.job == JobDefaults()


def test_every_key_lands_in_its_field(write_profile: WriteProfile) -> None:
    path = write_profile("full", FULL)
    profile = load_profile(path)
    assert profile.description == "every key"
    assert profile.path == str(path)
    assert profile.match == MatchRule(
        hostnames=("gpu[0-9][0-9]", "login*"),
        slurm_cluster_names=("full",),
        env=(("AMARK", "a"), ("ZMARK", "z*")),
    )
    assert profile.interfaces == ("ib0", "ib1")
    assert profile.master_addr == "{node}-ib"
    assert profile.port_range == (21000, 21999)
    assert profile.backend == "nccl"
    assert profile.exports == (("FI_PROVIDER", "cxi"), ("NCCL_IB_HCA", "mlx5"))
    assert profile.remove == ("MYLAB_*",)
    assert profile.keep == ("FI_*",)
    assert profile.job == JobDefaults(
        gpus_per_node=4,
        gpu_type="a100",
        gpu_request="gpus-per-node",
        cpus_per_task=16,
        partition="gpu",
        constraint="gpu",
        binds=("/data", "/scratch"),
    )


def test_content_hash_is_the_sha256_of_the_file_bytes(write_profile: WriteProfile) -> None:
    path = write_profile("hashed")
    first = load_profile(path).content_hash
    assert first == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(path.read_text() + "# a comment changes the hash\n")
    assert load_profile(path).content_hash != first


def test_path_may_be_a_string(write_profile: WriteProfile) -> None:
    assert load_profile(str(write_profile("text"))).name == "text"


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(ProfileError, match=f"cannot read site profile {re.escape(str(missing))}"):
        load_profile(missing)


def test_malformed_toml_names_file_line_and_column(write_profile: WriteProfile) -> None:
    path = write_profile("broken", '[site]\nname = "broken\n')
    with pytest.raises(ProfileError, match="not valid TOML") as caught:
        load_profile(path)
    assert str(path) in str(caught.value)
    assert "line 2, column" in str(caught.value)
    assert caught.value.hint is not None
    assert caught.value.hint.startswith("fix the TOML syntax at line 2, column")


def test_unknown_section_suggests_the_closest(write_profile: WriteProfile) -> None:
    path = write_profile("typo", '[site]\nname = "typo"\n[netwrk]\ninterfaces = ["ib0"]\n')
    with pytest.raises(ProfileError, match=r"unknown section \[netwrk\]") as caught:
        load_profile(path)
    assert str(path) in caught.value.message
    assert caught.value.hint is not None
    assert "did you mean [network]?" in caught.value.hint
    assert (
        "[clean], [container], [env], [fabric], [hardware], [job], [match], [network], "
        "[partitions], [qos], [site], [sources]" in caught.value.hint
    )


def test_unknown_key_is_dotted_with_suggestion_and_known_keys(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("typo", '[site]\nname = "typo"\n[network]\ninterface = ["ib0"]\n')
    with pytest.raises(ProfileError, match=r"unknown key 'network\.interface'") as caught:
        load_profile(path)
    assert str(path) in caught.value.message
    assert caught.value.hint == (
        "did you mean 'network.interfaces'? "
        "known keys in [network]: backend, interfaces, master_addr, port_range"
    )


def test_unknown_key_without_close_match_still_lists_known_keys(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("odd", '[site]\nname = "odd"\n[job]\nqueue = "long"\n')
    with pytest.raises(ProfileError, match=r"unknown key 'job\.queue'") as caught:
        load_profile(path)
    assert caught.value.hint is not None
    assert "did you mean" not in caught.value.hint
    assert "known keys in [job]: addons, binds, constraint, cpu_bind" in caught.value.hint


def test_key_outside_any_section_points_to_its_section(write_profile: WriteProfile) -> None:
    path = write_profile("bare", 'name = "bare"\n')
    with pytest.raises(ProfileError, match="unknown key 'name' outside any section") as caught:
        load_profile(path)
    assert caught.value.hint is not None
    assert "did you mean 'site.name'?" in caught.value.hint


def test_section_written_as_a_value_is_a_type_error(write_profile: WriteProfile) -> None:
    path = write_profile("flat", 'network = "ib0"\n[site]\nname = "flat"\n')
    with pytest.raises(ProfileError, match=r'\[network\] must be a table, found "ib0" \(string\)'):
        load_profile(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[job]\ngpus_per_node = "4"\n',
            r"""key 'job\.gpus_per_node' must be an integer, found "4" \(string\)""",
        ),
        (
            "[job]\ncpus_per_task = true\n",
            r"key 'job\.cpus_per_task' must be an integer, found true \(boolean\)",
        ),
        (
            "[job]\ngpus_per_node = 4.0\n",
            r"key 'job\.gpus_per_node' must be an integer, found 4\.0 \(float\)",
        ),
        (
            '[network]\ninterfaces = "ib0"\n',
            r"""key 'network\.interfaces' must be a list of strings, found "ib0" \(string\)""",
        ),
        (
            '[network]\ninterfaces = ["ib0", 1]\n',
            r"key 'network\.interfaces' must be a list of strings, "
            r'found \["ib0", 1\] \(array\)',
        ),
        (
            "[network]\nport_range = [20000]\n",
            r"key 'network\.port_range' must be a list of two integers \[low, high\], "
            r"found \[20000\] \(array\)",
        ),
        (
            "[network]\nmaster_addr = 5\n",
            r"key 'network\.master_addr' must be a string, found 5 \(integer\)",
        ),
        (
            "[env]\nNCCL_IB_TIMEOUT = 22\n",
            r"key 'env\.NCCL_IB_TIMEOUT' must be a string, found 22 \(integer\)",
        ),
        (
            "[match]\nenv = { SYSTEMNAME = 1 }\n",
            r"key 'match\.env\.SYSTEMNAME' must be a string, found 1 \(integer\)",
        ),
        (
            '[match]\nenv = "SYSTEMNAME"\n',
            r"key 'match\.env' must be a table of strings",
        ),
        (
            '[clean]\nremove = "PE_*"\n',
            r"""key 'clean\.remove' must be a list of strings, found "PE_\*" \(string\)""",
        ),
    ],
)
def test_wrong_type_names_key_expected_type_and_value(
    write_profile: WriteProfile, body: str, message: str
) -> None:
    path = write_profile("typed", '[site]\nname = "typed"\n' + body)
    with pytest.raises(ProfileError, match=message) as caught:
        load_profile(path)
    assert caught.value.message.startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[network]\nmaster_addr = "{host}"\n', r"unknown placeholder '\{host\}'"),
        ('[network]\nmaster_addr = "{}"\n', r"unknown placeholder '\{\}'"),
        ('[network]\nmaster_addr = "node01"\n', r"must contain '\{node\}' or start with"),
        ('[network]\nmaster_addr = "{node:>9}"\n', r"takes no format spec"),
        ('[network]\nmaster_addr = "{node"\n', r"not a valid template"),
        ('[network]\nmaster_addr = "interface:"\n', r"needs an interface name"),
        ('[network]\nmaster_addr = "interface:ib 0"\n', r"'ib 0' is not a network interface"),
        ("[network]\nport_range = [80, 90]\n", r"1024 <= low <= high <= 65535; found \[80, 90\]"),
        ("[network]\nport_range = [30000, 20000]\n", r"1024 <= low <= high"),
        ("[network]\nport_range = [20000, 70000]\n", r"high <= 65535"),
        ('[network]\nbackend = "mpi"\n', r'must be one of "", "nccl", "gloo"; found "mpi"'),
        ('[job]\ngpu_request = "gpus"\n', r'must be one of "gres", "gpus-per-node"; found "gpus"'),
        ("[job]\ngpus_per_node = -1\n", r"must be at least 0; found -1"),
        ("[job]\ncpus_per_task = 0\n", r"must be at least 1; found 0"),
        ('[network]\ninterfaces = ["ib0,ib1"]\n', r"'ib0,ib1' is not an interface name"),
        ('[env]\n"1BAD" = "x"\n', r"'1BAD' is not an environment variable name"),
        ('[match]\nhostnames = [""]\n', r"it has an empty entry"),
        ('[job]\nlocal_dir = "$(id)"\n', r"not a path the script can expand safely"),
        ('[job]\nlocal_dir = "tmp"\n', r"must start with / or a variable"),
        ('[container]\noptions = ["--a b"]\n', r"'--a b' is not one option word"),
        ('[container]\noptions = ["x"]\n', r"'x' is not one option word"),
        ('[container.annotations]\n"a b" = "1"\n', r"'a b' is not a dotted name"),
        ('[container.annotations]\n"a..b" = "1"\n', r"'a\.\.b' is not a dotted name"),
    ],
)
def test_value_out_of_domain_is_named(write_profile: WriteProfile, body: str, message: str) -> None:
    path = write_profile("domain", '[site]\nname = "domain"\n' + body)
    with pytest.raises(ProfileError, match=r"key '[a-z_.]+' is invalid: .*" + message):
        load_profile(path)


@pytest.mark.parametrize("body", ["", '[site]\ndescription = "no name"\n', "[job]\n"])
def test_missing_name_is_an_error(write_profile: WriteProfile, body: str) -> None:
    path = write_profile("nameless", body)
    with pytest.raises(ProfileError, match=r"missing required key 'site\.name'") as caught:
        load_profile(path)
    assert caught.value.hint == 'add [site] with name = "nameless"'


def test_empty_name_differs_from_missing(write_profile: WriteProfile) -> None:
    path = write_profile("blank", '[site]\nname = ""\n')
    with pytest.raises(ProfileError, match=r"key 'site\.name' is invalid: it is empty"):
        load_profile(path)


def test_name_must_equal_file_stem(write_profile: WriteProfile) -> None:
    path = write_profile("alpha", '[site]\nname = "beta"\n')
    with pytest.raises(
        ProfileError, match=r"site\.name 'beta' does not match the file name 'alpha'"
    ) as caught:
        load_profile(path)
    assert caught.value.hint == 'rename the file to beta.toml or set name = "alpha"'


@pytest.mark.parametrize(
    ("variable", "closest"),
    [
        ("NCCL_SOCKET_IFNAM", "NCCL_SOCKET_IFNAME"),
        ("NCCL_IB_HCAS", "NCCL_IB_HCA"),
        ("GLOO_SOCKET_IFNAMES", "GLOO_SOCKET_IFNAME"),
    ],
)
def test_unknown_nccl_or_gloo_variable_warns_with_closest(
    write_profile: WriteProfile, variable: str, closest: str
) -> None:
    path = write_profile("warned", f'[site]\nname = "warned"\n[env]\n{variable} = "x"\n')
    with pytest.warns(ProfileWarning, match=f"exports '{variable}'.*did you mean '{closest}'"):
        profile = load_profile(path)
    assert profile.exports == ((variable, "x"),)


def test_unknown_variable_with_nothing_close_warns_without_suggestion(
    write_profile: WriteProfile,
) -> None:
    path = write_profile("far", '[site]\nname = "far"\n[env]\nNCCL_ZZZZZZZZZZZZ = "1"\n')
    with pytest.warns(ProfileWarning) as record:
        load_profile(path)
    assert len(record) == 1
    assert "did you mean" not in str(record[0].message)
    assert str(path) in str(record[0].message)


@pytest.mark.parametrize(
    "variable", ["NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL", "GLOO_DEVICE_TRANSPORT", "FI_PROVIDER"]
)
def test_known_or_unchecked_variables_do_not_warn(
    write_profile: WriteProfile, variable: str
) -> None:
    path = write_profile("quiet", f'[site]\nname = "quiet"\n[env]\n{variable} = "x"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_profile(path)
