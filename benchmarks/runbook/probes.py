"""What the runbook asks the device in a process of its own (the runbook's own process never
holds a CUDA context), each answer one JSON object on stdout:

    python probes.py facts     # versions, the GPU, the driver, disk and /dev/shm
    python probes.py compat    # ddpimg's compatibility check against this GPU and driver
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict
from importlib import metadata
from typing import Any

import torch


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict[str, str]:
    fields = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    if shutil.which("nvidia-smi") is None:
        return {}
    proc = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"error": proc.stderr.strip()[-300:]}
    values = [value.strip() for value in proc.stdout.splitlines()[0].split(",")]
    return dict(zip(fields.split(","), values, strict=False))


def facts() -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    gpu: dict[str, Any] = {}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "count": torch.cuda.device_count(),
            "bf16": torch.cuda.is_bf16_supported(),
        }
    nccl = None
    if cuda:
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,  # type: ignore[no-untyped-call]
        "nccl": nccl,
        "arch_list": torch._C._cuda_getArchFlags() if torch.version.cuda else None,
        "torchvision": _version("torchvision"),
        "deepspeed": _version("deepspeed"),
        "ddpimg": _version("ddpimg"),
        "gpu": gpu,
        "nvidia_smi": _nvidia_smi(),
        "cpus": os.cpu_count(),
        "disk_free_gib": round(shutil.disk_usage(os.getcwd()).free / 2**30, 1),
        "shm_gib": None if shm is None else round(shm.total / 2**30, 1),
        # What ddpimg's clean environment would act on (docs/troubleshooting.md, "host
        # torch imported").
        "env": {name: os.environ.get(name) for name in ("LD_LIBRARY_PATH", "PYTHONPATH")},
    }


def compat() -> dict[str, Any]:
    """ddpimg's rule (what ``train`` checks before the rendezvous) on this GPU, for the torch
    that is here and for each image flavour the project builds."""
    from ddpimg.hardware.builds import BUILDS
    from ddpimg.hardware.compat import TorchProbe, build_fits, check_compatibility

    probe = TorchProbe()
    gpu, image = probe.gpu(), probe.image()
    problem = check_compatibility(gpu, image, BUILDS)
    return {
        "gpu": None if gpu is None else asdict(gpu),
        "image": asdict(image),
        "problem": None if problem is None else str(problem),
        "flavours": {} if gpu is None else {n: build_fits(b, gpu) for n, b in BUILDS.items()},
    }


PROBES = {"facts": facts, "compat": compat}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]](), default=str))
