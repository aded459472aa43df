"""Which flight-recorder variables a rank gets, and who wins (docs/launchers.md, "Precedence")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runtime.flight_recorder import enable_flight_recorder, flight_recorder_env

TRACES = "/runs/1/nccl-trace"
DEFAULTS = {
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_FR_DUMP_TEMP_FILE": f"{TRACES}/rank_",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{TRACES}/rank_",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
}


def test_nccl_gets_the_recorder_by_default() -> None:
    assert flight_recorder_env({}, "nccl", TRACES) == DEFAULTS


def test_gloo_gets_nothing() -> None:
    assert flight_recorder_env({}, "gloo", TRACES) == {}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # an exported buffer size (either spelling) wins over the default, for both names
        (
            {"TORCH_NCCL_TRACE_BUFFER_SIZE": "500"},
            {"TORCH_FR_BUFFER_SIZE": "500"},
        ),
        ({"TORCH_FR_BUFFER_SIZE": "64"}, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"}),
        # DDPIMG_FLIGHT_RECORDER wins over an exported size
        (
            {"DDPIMG_FLIGHT_RECORDER": "100", "TORCH_FR_BUFFER_SIZE": "64"},
            {"TORCH_FR_BUFFER_SIZE": "100", "TORCH_NCCL_TRACE_BUFFER_SIZE": "100"},
        ),
        # an exported dump prefix wins over --out's directory
        (
            {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/tmp/fr/r"},
            {"TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr/r"},
        ),
        ({"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}, {}),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, {}),
    ],
)
def test_exported_values_win(env: dict[str, str], expected: dict[str, str]) -> None:
    changes = flight_recorder_env(env, "nccl", TRACES)
    for name, value in expected.items():
        assert changes[name] == value, name
    for name in env:
        if name.startswith("TORCH_") and name not in expected:
            assert name not in changes, f"{name} was exported and must stay"


def test_zero_turns_it_off_but_keeps_the_watchdog_bound() -> None:
    changes = flight_recorder_env({"DDPIMG_FLIGHT_RECORDER": "0"}, "nccl", TRACES)
    assert changes == {
        "TORCH_FR_BUFFER_SIZE": "0",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }


def test_a_bad_switch_names_the_variable() -> None:
    with pytest.raises(DdpimgError, match=r"DDPIMG_FLIGHT_RECORDER='lots' is not a number"):
        flight_recorder_env({"DDPIMG_FLIGHT_RECORDER": "lots"}, "nccl", TRACES)


def test_without_an_out_directory_no_file_is_named() -> None:
    changes = flight_recorder_env({}, "nccl", None)
    assert "TORCH_FR_DUMP_TEMP_FILE" not in changes
    assert changes["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_enable_sets_the_environment_and_makes_the_directory(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    enable_flight_recorder("nccl", str(tmp_path / "out" / "nccl-trace"), env)
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "out" / "nccl-trace" / "rank_")
    assert (tmp_path / "out" / "nccl-trace").is_dir()


def test_a_run_directory_chosen_after_the_rendezvous_names_the_files_then(
    tmp_path: Path,
) -> None:
    """A run without --out has its directory only after init_process_group: the first call
    names no file, the second (torch reads the prefix when it first dumps) names them and
    changes nothing else."""
    env: dict[str, str] = {}
    enable_flight_recorder("nccl", None, env)
    before = dict(env)
    traces = tmp_path / "runs" / "mnist-7" / "nccl-trace"
    changed = enable_flight_recorder("nccl", str(traces), env)
    assert changed == dict.fromkeys(
        ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), f"{traces}/rank_"
    )
    assert {name: env[name] for name in before} == before
    assert traces.is_dir()
