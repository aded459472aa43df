"""Port derivation: deterministic, distinct across jobs and steps, inside the range."""

from __future__ import annotations

import subprocess
import sys
import zlib

import pytest

from ddpimg.errors import ProfileError
from ddpimg.topology.port import derive_port

RANGE = (29500, 29999)


@pytest.mark.parametrize(
    ("job_key", "port_range", "port"),
    [
        ("", RANGE, 29500),
        ("", (40000, 40000), 40000),
        # lo + (jobid * 16 + stepid % 16) % span, span = 500
        ("4242.0", RANGE, 29500 + (4242 * 16) % 500),
        ("4242.1", RANGE, 29500 + (4242 * 16 + 1) % 500),
        ("4242.17", RANGE, 29500 + (4242 * 16 + 1) % 500),
        ("4243.0", RANGE, 29500 + (4243 * 16) % 500),
        ("4242.0", (29500, 29500), 29500),
        ("4242.0", (1024, 65535), 1024 + (4242 * 16) % 64512),
        ("ddp-4242", RANGE, 29500 + zlib.crc32(b"ddp-4242") % 500),
        ("2076704769", RANGE, 29500 + zlib.crc32(b"2076704769") % 500),
        ("4242.batch", RANGE, 29500 + zlib.crc32(b"4242.batch") % 500),
    ],
)
def test_port_follows_the_documented_formula(
    job_key: str, port_range: tuple[int, int], port: int
) -> None:
    assert derive_port(job_key, port_range) == port


def test_consecutive_jobs_and_concurrent_steps_get_distinct_ports() -> None:
    keys = [f"{job}.{step}" for job in range(1000, 1031) for step in range(16)]
    # 496 consecutive values of jobid * 16 + stepid fit in a span of 500 without wrapping.
    assert len({derive_port(key, RANGE) for key in keys}) == len(keys)


@pytest.mark.parametrize("key", ["4242.3", "ddp-4242", "prterun-node1-12345@1"])
def test_port_is_identical_in_another_process(key: str) -> None:
    # Ranks run in separate interpreters: the port must not depend on hash randomisation.
    code = f"from ddpimg.topology import derive_port; print(derive_port({key!r}, {RANGE!r}))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == derive_port(key, RANGE)


@pytest.mark.parametrize(
    "port_range", [(1023, 2000), (30000, 29999), (29500, 65536), (0, 0), (70000, 70001)]
)
def test_invalid_range_is_a_profile_error(port_range: tuple[int, int]) -> None:
    low, high = port_range
    with pytest.raises(
        ProfileError, match=rf"port_range = \[{low}, {high}\] is not a usable port range"
    ) as caught:
        derive_port("4242.0", port_range)
    assert caught.value.hint is not None
    assert "1024 <= first <= last <= 65535" in caught.value.hint
