"""Helpers for the job tests: shipped profiles and specs built the way the CLI builds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpimg.jobs import JobSpec, resolve_job
from ddpimg.site import SiteProfile, load_profile

PROFILES = Path(__file__).resolve().parents[2] / "site-profiles"
TRAIN = ("train", "mnist", "--epochs", "5")


def shipped(name: str) -> SiteProfile:
    return load_profile(PROFILES / f"{name}.toml")


def spec_for(site: str = "puhti", **flags: Any) -> JobSpec:
    """A job on a shipped site from flags (by field name); 2 nodes, a time limit and a train
    command unless given."""
    given: dict[str, Any] = {"nodes": 2, "time": "01:00:00", "command": TRAIN} | flags
    return resolve_job(shipped(site), {k: v for k, v in given.items() if v is not None})
