from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.trackers.settings import (
    TrackerOptions,
    check_installed,
    log_to_setting,
    parse_log_to,
    resolve_settings,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("none", ()),
        (" None ", ()),
        ("tensorboard", ("tensorboard",)),
        ("wandb,mlflow", ("wandb", "mlflow")),
        (" MLflow , tensorboard ", ("mlflow", "tensorboard")),
        ("wandb,wandb", ("wandb",)),
        ("tensorboard,,wandb", ("tensorboard", "wandb")),
    ],
)
def test_parse_log_to(text: str, expected: tuple[str, ...]) -> None:
    assert parse_log_to(text) == expected


@pytest.mark.parametrize("text", ["tensorbord", "wandb,comet", "none,wandb"])
def test_parse_log_to_names_the_unknown_tracker(text: str) -> None:
    with pytest.raises(DdpimgError, match=r"DDPIMG_LOG_TO: unknown tracker .* in") as info:
        parse_log_to(text, "DDPIMG_LOG_TO")
    assert "tensorboard, wandb, mlflow" in str(info.value)


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        # The flag wins, even when it says none.
        ("mlflow", {"DDPIMG_LOG_TO": "wandb"}, ("mlflow",)),
        ("none", {"DDPIMG_LOG_TO": "wandb"}, ()),
        # The variable (the user's or the site profile's [env] default) otherwise.
        (None, {"DDPIMG_LOG_TO": "wandb,tensorboard"}, ("wandb", "tensorboard")),
        # The default: no tracker.
        (None, {}, ()),
    ],
)
def test_log_to_precedence(
    flag: str | None, env: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert log_to_setting(flag, env) == expected


def test_a_bad_variable_is_named() -> None:
    with pytest.raises(DdpimgError, match="DDPIMG_LOG_TO: unknown tracker 'tb'"):
        log_to_setting(None, {"DDPIMG_LOG_TO": "tb"})


OUT = Path("/runs/exp1")


def test_defaults_offline_and_a_file_store_under_out() -> None:
    settings = resolve_settings(("wandb", "mlflow"), OUT, {}, TrackerOptions())
    assert settings.wandb_mode == "offline"
    assert settings.mlflow_uri == "file:///runs/exp1/mlruns"
    assert settings.mlflow_file_store
    assert (settings.project, settings.experiment, settings.run_name) == (
        "ddpimg",
        "ddpimg",
        "exp1",
    )
    assert settings.run_group == settings.wandb_entity == ""


def test_options_win_over_the_variables() -> None:
    env = {
        "WANDB_PROJECT": "p-env",
        "WANDB_NAME": "n-env",
        "WANDB_RUN_GROUP": "g-env",
        "WANDB_ENTITY": "e-env",
        "MLFLOW_EXPERIMENT_NAME": "x-env",
    }
    options = TrackerOptions(project="p", run_name="n", run_group="g", wandb_entity="e")
    settings = resolve_settings(("wandb", "mlflow"), OUT, env, options)
    assert (settings.project, settings.experiment) == ("p", "p")
    assert (settings.run_name, settings.run_group, settings.wandb_entity) == ("n", "g", "e")
    from_env = resolve_settings(("wandb", "mlflow"), OUT, env, TrackerOptions())
    assert (from_env.project, from_env.experiment) == ("p-env", "x-env")
    assert (from_env.run_name, from_env.run_group, from_env.wandb_entity) == (
        "n-env",
        "g-env",
        "e-env",
    )


@pytest.mark.parametrize(
    ("mode", "expected"), [("online", "online"), ("OFFLINE", "offline"), ("dryrun", "offline")]
)
def test_wandb_mode_comes_from_wandb_mode(mode: str, expected: str) -> None:
    settings = resolve_settings(("wandb",), OUT, {"WANDB_MODE": mode}, TrackerOptions())
    assert settings.wandb_mode == expected


def test_a_bad_wandb_mode_is_named() -> None:
    with pytest.raises(DdpimgError, match="WANDB_MODE='cloud' is not a W&B mode"):
        resolve_settings(("wandb",), OUT, {"WANDB_MODE": "cloud"}, TrackerOptions())
    # Not checked when W&B is not asked for.
    resolve_settings(("mlflow",), OUT, {"WANDB_MODE": "cloud"}, TrackerOptions())


def test_the_tracking_uri_is_used_and_checked() -> None:
    env = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}
    settings = resolve_settings(("mlflow",), OUT, env, TrackerOptions())
    assert settings.mlflow_uri == "http://127.0.0.1:5000"
    assert not settings.mlflow_file_store
    with pytest.raises(DdpimgError, match="MLFLOW_TRACKING_URI='http://' names no server"):
        resolve_settings(("mlflow",), OUT, {"MLFLOW_TRACKING_URI": "http://"}, TrackerOptions())


def test_a_missing_package_is_named() -> None:
    installed = {"tensorboard", "mlflow"}

    def find_spec(name: str) -> object | None:
        return name if name in installed else None

    check_installed(("tensorboard", "mlflow"), find_spec)
    with pytest.raises(DdpimgError, match="wandb needs the Python package wandb") as info:
        check_installed(("tensorboard", "wandb"), find_spec)
    assert "pip install wandb" in str(info.value)
    installed.discard("mlflow")
    with pytest.raises(DdpimgError, match="pip install mlflow-skinny"):
        check_installed(("mlflow",), find_spec)
