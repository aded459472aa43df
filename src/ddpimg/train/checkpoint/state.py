"""What a checkpoint holds besides the strategy's model and optimizer state: where the loop
was (``LoopState``), what the run was (the config fingerprint), and the RNG states.

``loop.json`` (rank 0) is the position, readable without torch; ``loop.pt`` (rank 0) the
scheduler state; ``rng/rank-NNNNN.pt`` (every rank) that rank's RNG states. The trainers
draw every random number from generators seeded by (seed, position), so the global RNG
streams only matter to code outside that rule; they are restored all the same.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ddpimg.errors import DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.tasks import FREE_TO_CHANGE_OPTIONS, arguments_json

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig

LOOP_JSON = "loop.json"
LOOP_JSON_LIMIT = 1 << 20  # ddpimg writes about 2 KiB
# Steps, epochs, batch sizes and line counts fit torch's int64 (and every real run, by far).
MAX_COUNT = 2**63
LOOP_PT = "loop.pt"
RNG_DIR = "rng"

# Options that may differ between a run and its resumption: how long it trains, how it
# logs, evaluates the held-out set, checkpoints and stops, and where it writes; and the
# trainers' options declared so (``option(free_to_change=True)``: which evaluation set, how
# many processes load the data, how unreadable samples are treated, the weights it started
# from: a resumed run loads the checkpoint's). The batch options are replaced by the global
# batch they give (the micro-batch only decides how it is computed, except for a model with
# BatchNorm: then the samples it normalises over are compared), ``--data`` by its kind
# (synthetic or files: the same files may move, e.g. staged to node-local disk by each job).
# Any other option, those added later included, decides the trajectory and must match.
FREE_TO_CHANGE = (
    frozenset(
        {
            "epochs",
            "max_steps",
            "batch_size",
            "global_batch_size",
            "micro_batch_size",
            "eval_samples",
            "out",
            "deterministic",
            "log_every",
            "warmup_steps",
            "checkpoint_every",
            "keep_checkpoints",
            "resume",
            "preempt_signals",
            "preempt_check_every",
            # Compiled and eager modules share their state dicts (ddpimg.train.compiling).
            "compile",
            "compile_backend",
        }
    )
    | FREE_TO_CHANGE_OPTIONS
)


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "bool": bool,
    "str": str,
    "dict[str, Any]": dict,
}


def rng_file(rank: int) -> str:
    return f"{RNG_DIR}/rank-{rank:05d}.pt"


@dataclass(frozen=True)
class LoopState:
    """The loop's position after an optimizer step: ``step`` steps done in all, the
    current ``epoch`` (from 1; 0 before the first) with ``index`` of its steps done, and
    whether its evaluation and scheduler step are done too (``epoch_done``). Also the
    values the summary reports if no step follows: the last step's global mean loss, the
    last evaluation, and the clock (``elapsed_s`` wall time, ``excluded_s`` of it spent
    outside training)."""

    step: int = 0
    epoch: int = 0
    index: int = 0
    epoch_done: bool = True
    last_loss: float = math.nan
    eval_loss: float = math.nan
    eval_accuracy: float = math.nan
    elapsed_s: float = 0.0
    excluded_s: float = 0.0


@dataclass(frozen=True)
class CheckpointRecord:
    """``loop.json``: the position, and what it takes to continue from it."""

    loop: LoopState
    world_size: int
    global_batch: int
    strategy: str
    fingerprint: dict[str, Any]
    metrics_lines: int
    reason: str
    saved_utc: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, path: Path) -> CheckpointRecord:
        """Parse ``loop.json`` of checkpoint ``path``; a DdpimgError names what is wrong."""

        def bad(what: str) -> DdpimgError:
            return DdpimgError(
                f"checkpoint {path}: {LOOP_JSON} {what}",
                hint="it was written by another ddpimg version, or edited; resume from "
                "another checkpoint (--resume PATH) or start over (--resume none)",
            )

        if not isinstance(data, dict) or not isinstance(data.get("loop"), dict):
            raise bad("is not a JSON object with a 'loop' object")
        try:
            record = cls(**{**data, "loop": LoopState(**data["loop"])})
        except TypeError as err:
            raise bad(f"lacks keys or has unknown ones ({err})") from err
        for owner in (record.loop, record):
            for item in fields(owner):
                value = getattr(owner, item.name)
                expected = _JSON_TYPES.get(str(item.type))
                # bool is an int to isinstance; JSON keeps them apart.
                if expected and (type(value) is bool) != (item.type == "bool"):
                    raise bad(f"has {item.name}={value!r}, expected {item.type}")
                if expected and not isinstance(value, expected):
                    raise bad(f"has {item.name}={value!r}, expected {item.type}")
        _check_ranges(record, path, bad)
        return record


def _check_ranges(record: CheckpointRecord, path: Path, bad: Callable[[str], DdpimgError]) -> None:
    """What the types alone let through: counts below their least value (a step of -5),
    times that are negative or not finite, and a step other than the checkpoint's name's."""
    from ddpimg.train.checkpoint.files import step_of

    loop = record.loop
    counts = (
        ("step", loop.step, 0),
        ("epoch", loop.epoch, 0),
        ("index", loop.index, 0),
        ("world_size", record.world_size, 1),
        ("global_batch", record.global_batch, 1),
        ("metrics_lines", record.metrics_lines, 0),
    )
    for name, value, least in counts:
        if not least <= value < MAX_COUNT:
            raise bad(f"has {name}={value!r}, expected a whole number from {least} below 2**63")
    if loop.index > loop.step:
        raise bad(f"has index={loop.index} in its epoch but step={loop.step} in all")
    for name, seconds in (("elapsed_s", loop.elapsed_s), ("excluded_s", loop.excluded_s)):
        if not (math.isfinite(seconds) and seconds >= 0):
            raise bad(f"has {name}={seconds!r}, expected seconds from 0")
    named = step_of(path)
    if named is not None and named != loop.step:
        raise bad(f"has step={loop.step}, but the checkpoint's name says step {named}")


def fingerprint(
    config: TrainConfig, batch: BatchLayout, task_facts: Mapping[str, int]
) -> dict[str, Any]:
    """The options that decide the loss trajectory, as JSON values (the batch options as
    ``batch``'s global size; no world size: every strategy continues on any), and what the
    task adds (``Task.fingerprint``: BatchNorm's samples, a vocabulary)."""
    values = {k: v for k, v in arguments_json(config).items() if k not in FREE_TO_CHANGE}
    values["data"] = "synthetic" if config.data == SYNTHETIC else "files"
    values["global_batch"] = batch.global_size
    return values | dict(task_facts)


def _describe(key: str) -> str:
    if key == "trainer":
        return "the trainer"
    if key == "global_batch":
        return "the global batch (--batch-size x world size, or --global-batch-size)"
    if key == "vocabulary":
        return "the model's vocabulary (the data's tokenizer's, or --init-from's)"
    if key == "batchnorm_samples":
        return (
            "the samples BatchNorm normalises over in one forward pass (--micro-batch-size "
            "x world size; --micro-batch-size alone with --no-sync-batchnorm)"
        )
    return "--" + key.replace("_", "-")


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Raise a DdpimgError naming every option that differs between the checkpoint's run
    and this one (options known to only one of them are not compared)."""
    differing = [key for key in sorted(saved.keys() & current.keys()) if saved[key] != current[key]]
    if not differing:
        return
    differences = [
        f"{_describe(key)}: {saved[key]!r} in the checkpoint, {current[key]!r} now"
        for key in differing
    ]
    hint = (
        "resume with the checkpoint's options, start over with --resume none (removes the "
        "checkpoints of --out), or use another --out"
    )
    if "batchnorm_samples" in differing and "global_batch" not in differing:
        hint = (
            f"give a --micro-batch-size that makes {saved['batchnorm_samples']} samples a "
            "forward pass on this world size, or start over with --resume none; a model "
            "trained with --no-sync-batchnorm continues on any world size with the same "
            "--micro-batch-size"
        )
    raise DdpimgError(
        f"checkpoint {path} belongs to another configuration; " + "; ".join(differences),
        hint=hint,
    )


def capture_rng() -> dict[str, Any]:
    """This process's global RNG states: torch (CPU and every CUDA device in use), Python,
    NumPy. Plain values and tensors only, so that ``torch.load(weights_only=True)`` reads
    them."""
    import numpy
    import torch

    legacy = cast("tuple[str, Any, int, int, float]", numpy.random.get_state(legacy=True))
    _, keys, position, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [keys.tolist(), int(position), int(has_gauss), float(cached)],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_mismatch(state: Any) -> str | None:
    """Where ``state`` (an RNG file's content) differs from what ``capture_rng`` writes, or
    None. CUDA states, present only where CUDA ran, are checked when there."""
    import torch

    from ddpimg.train.checkpoint.structure import mismatch

    template = {key: value for key, value in capture_rng().items() if key != "cuda"}
    if not isinstance(state, dict):
        return mismatch(state, template)
    cuda = state.get("cuda")
    if cuda is not None and not (
        isinstance(cuda, list)
        and all(isinstance(item, torch.Tensor) and item.dtype == torch.uint8 for item in cuda)
    ):
        return "cuda: not a list of CUDA generator states"
    return mismatch({key: value for key, value in state.items() if key != "cuda"}, template)


def restore_rng(state: dict[str, Any]) -> None:
    """Undo ``capture_rng``; CUDA states are restored for the devices both runs have."""
    import numpy
    import torch

    torch.set_rng_state(state["torch"])
    version, keys, gauss_next = state["python"]
    random.setstate((version, tuple(keys), gauss_next))
    keys, position, has_gauss, cached = state["numpy"]
    mt19937 = numpy.array(keys, dtype=numpy.uint32)
    numpy.random.set_state(("MT19937", mt19937, position, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        for index, device_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(device_state, index)
