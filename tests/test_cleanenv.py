from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from ddpimg.cleanenv import clean_environment, matches_pattern, parse_keep_list

HOST = {
    "LOADEDMODULES": "gcc/12:cuda/11.8",
    "MODULEPATH": "/appl/modules",
    "LMOD_CMD": "/usr/share/lmod/lmod/libexec/lmod",
    "_LMFILES_": "/appl/modules/gcc/12.lua",
    "BASH_FUNC_module%%": "() { eval $($LMOD_CMD bash $*); }",
    "PYTHONPATH": "/home/u/lib/python",
    "PYTHONHOME": "/appl/python/3.9",
    "CONDA_PREFIX": "/home/u/miniconda3",
    "VIRTUAL_ENV": "/home/u/venv",
    "LD_PRELOAD": "/appl/lib/libhook.so",
    "HOME": "/home/u",
    "PATH": "/usr/bin:/bin",
    "SLURM_PROCID": "0",
    "PMI_RANK": "0",
    "OMPI_COMM_WORLD_RANK": "0",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NCCL_DEBUG": "INFO",
}


def test_default_removal_covers_modules_python_conda_and_preload() -> None:
    clean = clean_environment(HOST)
    assert clean.removed == tuple(
        sorted(
            [
                "BASH_FUNC_module%%", "CONDA_PREFIX", "LD_PRELOAD", "LMOD_CMD", "LOADEDMODULES",
                "MODULEPATH", "PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "_LMFILES_",
            ]
        )
    )  # fmt: skip
    kept = clean.apply(HOST)
    for name in ("HOME", "PATH", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK",
                 "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"):  # fmt: skip
        assert kept[name] == HOST[name]


@pytest.mark.parametrize(
    ("value", "expected_value", "removed"),
    [
        ("/appl/cuda/11.8/lib64", None, True),
        ("/appl/cuda/11.8/lib64:/.singularity.d/libs", "/.singularity.d/libs", True),
        ("/.singularity.d/libs", "/.singularity.d/libs", False),
        (
            "/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
            "/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
            False,
        ),
        ("/usr/local/nvidia/lib64x", None, True),
    ],
)
def test_ld_library_path_keeps_only_container_runtime_dirs(
    value: str, expected_value: str | None, removed: bool
) -> None:
    clean = clean_environment({"LD_LIBRARY_PATH": value})
    assert ("LD_LIBRARY_PATH" in clean.removed) is removed
    assert clean.apply({"LD_LIBRARY_PATH": value}).get("LD_LIBRARY_PATH") == expected_value


def test_keep_patterns_win_over_default_and_profile_removal() -> None:
    env = {"PYTHONPATH": "/x", "SITE_JUNK": "1", "SITE_JUNK_OK": "2"}
    clean = clean_environment(env, extra_remove=["SITE_JUNK*"], keep=["PYTHONPATH", "SITE_JUNK_OK"])
    assert clean.removed == ("SITE_JUNK",)


def test_launcher_variables_are_kept_even_when_a_profile_pattern_matches_them() -> None:
    clean = clean_environment({"SLURM_JOB_ID": "1", "OMPI_X": "y"}, extra_remove=["*"])
    assert clean.removed == ()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", ()), ("PYTHONPATH", ("PYTHONPATH",)), ("A, B  C,,", ("A", "B", "C"))],
)
def test_parse_keep_list(value: str, expected: tuple[str, ...]) -> None:
    assert parse_keep_list(value) == expected


@pytest.mark.parametrize(
    "pattern",
    ["LMOD_CMD", "LMOD_*", "*_VISIBLE_DEVICES", "MODULE_*_PATH", "*", "**", "A*B*C", "LMOD_?MD",
     "[LM]MOD_CMD", "X*", "*X", ""],
)  # fmt: skip
@pytest.mark.parametrize(
    "name",
    ["LMOD_CMD", "LMOD_", "LMOD", "lmod_cmd", "CUDA_VISIBLE_DEVICES", "_VISIBLE_DEVICES",
     "MODULE_PATH", "MODULE__PATH", "MODULE_X_PATH", "ABC", "AXBXC", "AC", "A\nB", "X", ""],
)  # fmt: skip
def test_matches_pattern_agrees_with_fnmatchcase(pattern: str, name: str) -> None:
    assert matches_pattern(name, pattern) == fnmatchcase(name, pattern)
