"""Every reader of what a user can be handed, fuzzed (issue 47; the data readers are in
tests/data/test_fuzzed_readers.py): safetensors headers, a Hugging Face config.json, the
checkpoint files (complete.json, loop.json, loop.pt, the RNG states, DDP's model.pt),
metrics lines, site profiles, job files, host lists and tasks-per-node strings.

Property (Hypothesis, derandomised: ``tests.fuzz``): every example, valid input mutated or
arbitrary, ends in data that satisfies the reader's bounds, or in the reader's named error
(a DdpimgError: ``ddpimg: error:``, exit status 2), within the time and memory bounds of
``tests.fuzz.within_bounds``. Nothing else may escape: no RecursionError, no bare
ValueError, TypeError or KeyError, no SafetensorError, no loop or allocation sized by a
number in the input.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from hypothesis import given
from hypothesis import strategies as st

from ddpimg.errors import DdpimgError, HostlistError
from ddpimg.jobs import load_job_file
from ddpimg.plot import read_run
from ddpimg.site.load import load_profile
from ddpimg.topology.hostlist import MAX_HOSTS, expand_hostlist
from ddpimg.topology.model import MAX_WORLD_SIZE
from ddpimg.topology.tasks import parse_tasks_per_node
from ddpimg.train.checkpoint.files import verify, write_marker
from ddpimg.train.checkpoint.resume import read_record
from ddpimg.train.checkpoint.state import (
    MAX_COUNT,
    CheckpointRecord,
    LoopState,
    capture_rng,
    rng_mismatch,
)
from ddpimg.train.checkpoint.structure import mismatch
from ddpimg.train.strategies.ddp import _state_mismatch
from ddpimg.train.tasks.gpt import hf
from ddpimg.train.tasks.gpt.config import MAX_DIMENSIONS
from ddpimg.train.tasks.gpt.safetensors_header import read_header
from ddpimg.untrusted import BadInput
from tests.fuzz import fuzz_settings, within_bounds

T = TypeVar("T")
FUZZ = fuzz_settings(60)
PROFILES = Path(__file__).resolve().parents[1] / "site-profiles"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def ends(
    read: Callable[[], T], errors: tuple[type[BaseException], ...] = (DdpimgError,)
) -> T | None:
    """``read()``'s result, or None when it raised one of ``errors``, within the bounds."""
    with within_bounds("a reader of a fuzzed input"):
        try:
            return read()
        except errors:
            return None


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` with a few bytes changed, a cut, or bytes inserted; or random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=len(raw) + 16))
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["byte", "cut", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 40))]
        else:
            data[at:at] = draw(st.sampled_from([b"[", b"{", b'"', b"9" * 50, b"\n", b"\x1b[2J"]))
    return bytes(data)


# --- safetensors headers and config.json ------------------------------------------------


def safetensors_file() -> bytes:
    from safetensors.torch import save

    raw: bytes = save({"a": torch.zeros(2, 3), "b": torch.ones(4, dtype=torch.float16)})
    return raw


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """A valid file whose header JSON got fields replaced, or whose bytes were mutated."""
    raw = safetensors_file()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    if draw(st.booleans()):
        entry = header[draw(st.sampled_from(["a", "b"]))]
        key = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
        entry[key] = draw(
            st.one_of(
                json_values,
                st.lists(st.integers(-(2**65), 2**65), max_size=4),
                st.sampled_from(["F32", "F7", "I64", "BOOL"]),
            )
        )
        text = json.dumps(header).encode()
        length = draw(st.one_of(st.just(len(text)), st.integers(0, 2**64 - 1)))
        return length.to_bytes(8, "little") + text + raw[8 + size :]
    return draw(mutated(raw))


@FUZZ
@given(raw=headers())
def test_any_safetensors_header_ends_in_tensors_or_a_named_error(
    tmp_path: Path, raw: bytes
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw)
    entries = ends(lambda: read_header(path), (BadInput,))
    if entries is not None:
        for entry in entries.values():
            assert entry["data_offsets"][1] <= len(raw)
    tensors = ends(lambda: hf._load_safetensors(path))
    if tensors is not None:
        assert all(isinstance(value, torch.Tensor) for value in tensors.values())


VALID_CONFIG = {
    "model_type": "gpt2", "vocab_size": 64, "n_positions": 16, "n_embd": 8, "n_layer": 1,
    "n_head": 2, "n_inner": None, "activation_function": "gelu_new",
}  # fmt: skip


@FUZZ
@given(
    changes=st.dictionaries(st.sampled_from(sorted(VALID_CONFIG)), json_values, max_size=3),
    text=st.one_of(st.none(), st.binary(max_size=40)),
)
def test_any_config_json_ends_in_a_bounded_shape_or_a_named_error(
    tmp_path: Path, changes: dict[str, Any], text: bytes | None
) -> None:
    (tmp_path / "config.json").write_bytes(
        json.dumps(VALID_CONFIG | changes).encode() if text is None else text
    )
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 20_000)
    shape = ends(lambda: hf.read_config(tmp_path))
    if shape is not None:
        for name, bound in MAX_DIMENSIONS.items():
            assert 1 <= getattr(shape, name) <= bound
        assert shape.parameters <= 20_000


# --- checkpoint files -------------------------------------------------------------------


def loop_record() -> dict[str, Any]:
    record = CheckpointRecord(
        loop=LoopState(step=4, epoch=1, index=4), world_size=2, global_batch=8,
        strategy="ddp", fingerprint={"trainer": "toy", "lr": 0.1}, metrics_lines=4,
        reason="interval", saved_utc="2026-01-01T00:00:00Z",
    )  # fmt: skip
    data: dict[str, Any] = json.loads(json.dumps(record.to_json()))
    return data


@st.composite
def loop_jsons(draw: st.DrawFn) -> bytes:
    data = loop_record()
    if draw(st.booleans()):
        target = data["loop"] if draw(st.booleans()) else data
        target[draw(st.sampled_from(sorted(target)))] = draw(json_values)
        return json.dumps(data).encode()
    return draw(mutated(json.dumps(data).encode()))


@FUZZ
@given(loop=loop_jsons(), marker=st.one_of(st.none(), st.binary(max_size=60), json_values))
def test_any_loop_json_and_marker_end_in_a_checked_record_or_a_reason(
    tmp_path: Path, loop: bytes, marker: Any
) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-00000004"
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "loop.json").write_bytes(loop)
    write_marker(checkpoint, 4)
    if marker is not None:
        text = marker if isinstance(marker, bytes) else json.dumps(marker).encode()
        (checkpoint / "complete.json").write_bytes(text)
    reason = ends(lambda: verify(checkpoint))
    assert reason is None or isinstance(reason, str)
    record = ends(lambda: read_record(checkpoint))
    if record is not None:
        assert 0 <= record.loop.index <= record.loop.step == 4
        assert 1 <= record.world_size < MAX_COUNT
        assert record.loop.elapsed_s >= 0


tensors = st.sampled_from([torch.zeros(3), torch.zeros(2, dtype=torch.uint8), torch.tensor(1.5)])
loaded_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=4)
    | tensors,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.sampled_from(["torch", "python", "numpy", "model", "optimizer",
                                           "state", "param_groups", "cuda", "x"]), inner,
                          max_size=4)
    ),
    max_leaves=10,
)  # fmt: skip


def through_torch(value: Any) -> Any:
    """``value`` as ``torch.load(weights_only=True)`` reads it back from a file."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@FUZZ
@given(found=loaded_values)
def test_any_loaded_checkpoint_structure_is_judged_without_an_error(found: Any) -> None:
    """What ``torch.load(weights_only=True)`` may return from loop.pt, an RNG file or
    model.pt: the checks before use say where it differs, or let it pass, and raise
    nothing (a TypeError in them would be the traceback they exist to prevent)."""
    value = through_torch(found)
    with within_bounds("judging a loaded structure"):
        verdicts = [
            rng_mismatch(value),
            mismatch(value, {"scheduler": {"last_epoch": 1, "_last_lr": [0.1]}}),
            _state_mismatch(value),
        ]
    assert all(verdict is None or isinstance(verdict, str) for verdict in verdicts)
    assert rng_mismatch(through_torch(capture_rng())) is None


# --- metrics lines ----------------------------------------------------------------------

VALID_LINES = [
    {"kind": "train", "epoch": 1, "step": 1, "loss": 2.0, "samples_per_s": 10.0, "lr": 0.1},
    {"kind": "eval", "epoch": 1, "loss": 1.0, "accuracy": 0.5, "samples": 8, "set_samples": 9},
    {"kind": "summary", "world_size": 2, "samples_per_s": 10.0, "steps_per_epoch": 1},
]


@st.composite
def metrics_files(draw: st.DrawFn) -> bytes:
    lines = [dict(line) for line in VALID_LINES]
    if draw(st.booleans()):
        line = lines[draw(st.integers(0, 2))]
        line[draw(st.sampled_from(sorted(line)))] = draw(json_values)
        return "".join(json.dumps(line) + "\n" for line in lines).encode()
    return draw(mutated("".join(json.dumps(line) + "\n" for line in lines).encode()))


@FUZZ
@given(raw=metrics_files())
def test_any_metrics_file_ends_in_curves_or_a_named_error(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(raw)
    run = ends(lambda: read_run(tmp_path))
    if run is not None:
        assert all(isinstance(point.loss, float) for point in run.steps)
        assert all(point.lr is None or point.lr >= 0 for point in run.steps)
        assert run.world_size is None or run.world_size >= 1


# --- site profiles and job files --------------------------------------------------------


@FUZZ
@given(data=st.data(), name=st.sampled_from(["della", "lumi", "generic", "palmetto"]))
def test_any_site_profile_ends_in_a_profile_or_a_named_error(
    tmp_path: Path, data: st.DataObject, name: str
) -> None:
    raw = data.draw(mutated((PROFILES / f"{name}.toml").read_bytes()))
    (tmp_path / f"{name}.toml").write_bytes(raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown NCCL_* name warns: not the subject here
        profile = ends(lambda: load_profile(tmp_path / f"{name}.toml"))
    assert profile is None or profile.name == name


JOB_FILE = b'site = "della"\nnodes = 2\ntime = "01:00:00"\ncommand = ["train", "toy"]\n'


@FUZZ
@given(raw=mutated(JOB_FILE))
def test_any_job_file_ends_in_values_or_a_named_error(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "job.toml").write_bytes(raw)
    job = ends(lambda: load_job_file(tmp_path / "job.toml"))
    assert job is None or isinstance(job.values, dict)


# --- host lists and tasks per node ------------------------------------------------------

hostlist_text = st.text(alphabet="n[]0123456789,-x() \t", max_size=40)


@FUZZ
@given(value=st.one_of(hostlist_text, st.text(max_size=20)))
def test_any_hostlist_ends_in_bounded_hosts_or_a_named_error(value: str) -> None:
    hosts = ends(lambda: expand_hostlist(value), (HostlistError,))
    assert hosts is None or 1 <= len(hosts) <= MAX_HOSTS


@FUZZ
@given(
    value=st.one_of(
        hostlist_text,
        st.lists(
            st.tuples(st.integers(0, 10**12), st.one_of(st.none(), st.integers(0, 10**12))),
            min_size=1,
            max_size=4,
        ).map(lambda entries: ",".join(f"{n}" if r is None else f"{n}(x{r})" for n, r in entries)),
    )
)
def test_any_tasks_per_node_ends_in_bounded_counts_or_a_named_error(value: str) -> None:
    counts = ends(lambda: parse_tasks_per_node(value), (HostlistError,))
    assert counts is None or (len(counts) <= MAX_HOSTS and sum(counts) <= MAX_WORLD_SIZE)
