"""The rendezvous port, derived from the job's identity so that every rank agrees without talking.

Every rank computes the same port from the same job key, and different jobs sharing a node get
different ports. For Slurm keys ``"<jobid>.<stepid>"`` the port is
``lo + (jobid * 16 + stepid % 16) % span``: consecutive job ids land 16 ports apart and up to
16 concurrent steps of one job get distinct ports. Any other key is hashed with CRC-32 (stable
across processes and Python versions, unlike ``hash``). The empty key gives ``lo``.
"""

from __future__ import annotations

import re
import zlib

from ddpimg.errors import ProfileError

_SLURM_KEY = re.compile(r"([0-9]+)\.([0-9]+)", re.ASCII)
_STEPS_PER_JOB = 16


def derive_port(job_key: str, port_range: tuple[int, int]) -> int:
    """A port in the inclusive ``port_range`` that is identical on every rank of one job."""
    low, high = port_range
    if not 1024 <= low <= high <= 65535:
        raise ProfileError(
            f"port_range = [{low}, {high}] is not a usable port range",
            "give two ports with 1024 <= first <= last <= 65535, such as [29500, 29999]",
        )
    span = high - low + 1
    if not job_key:
        return low
    match = _SLURM_KEY.fullmatch(job_key)
    if match is not None:
        job_id, step_id = int(match.group(1)), int(match.group(2))
        return low + (job_id * _STEPS_PER_JOB + step_id % _STEPS_PER_JOB) % span
    return low + zlib.crc32(job_key.encode()) % span
