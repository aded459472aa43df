"""The header of a ``model.safetensors`` file, checked before the safetensors library reads
the file: an 8-byte little-endian length, then a JSON object that names each tensor's dtype,
shape and byte range (``data_offsets``, relative to the end of the header).

The library itself refuses a malformed header with its own ``SafetensorError``, but only
after allocating what the header asks for in some cases, and ddpimg's contract is a named
error (exit status 2), never a traceback. So the header is read within bounds
(``MAX_HEADER_BYTES``, the library's own limit; JSON through ``ddpimg.untrusted``) and every
entry checked: a known dtype, a shape of whole numbers, a byte range inside the file whose
length is the shape's.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ddpimg.untrusted import BadInput, open_regular, parse_json

# safetensors' own bound on the header (100 MB).
MAX_HEADER_BYTES = 100_000_000
MAX_RANK = 16
# The longest name or list an error quotes from a header.
MAX_SHOWN = 80
# Bytes per element of each dtype safetensors writes.
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
METADATA = "__metadata__"


def read_header(path: Path) -> dict[str, dict[str, Any]]:
    """The tensors ``path``'s header describes (name -> dtype, shape, data_offsets), every
    one checked; BadInput saying what is wrong with the first that is not."""
    descriptor = open_regular(path)
    try:
        size = os.fstat(descriptor).st_size
        prefix = os.pread(descriptor, 8, 0)
        if len(prefix) < 8:
            raise BadInput(f"{size} bytes, too short for a safetensors header")
        length = int.from_bytes(prefix, "little")
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise BadInput(
                f"its header says it is {length:,} bytes long; the file has {size:,} "
                f"(at most {MAX_HEADER_BYTES:,})"
            )
        raw = os.pread(descriptor, length, 8)
    finally:
        os.close(descriptor)
    header = parse_json(raw)
    if not isinstance(header, dict):
        raise BadInput("its header is not a JSON object")
    data_bytes = size - 8 - length
    tensors: dict[str, dict[str, Any]] = {}
    for name, entry in header.items():
        if name == METADATA:
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise BadInput(f"its {METADATA} is not an object of strings")
            continue
        _check_entry(name, entry, data_bytes)
        tensors[name] = entry
    return tensors


def _check_entry(name: str, entry: object, data_bytes: int) -> None:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise BadInput(f"tensor {_short(name)}: not an entry of dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise BadInput(f"tensor {_short(name)}: unknown dtype {_short(dtype)}")
    if not _whole_numbers(shape) or len(shape) > MAX_RANK:
        raise BadInput(
            f"tensor {_short(name)}: shape {_short(shape)} is not a list of whole numbers"
        )
    if not _whole_numbers(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
        raise BadInput(f"tensor {_short(name)}: data_offsets {_short(offsets)} is not a range")
    if offsets[1] > data_bytes:
        raise BadInput(
            f"tensor {_short(name)}: data_offsets {_short(offsets)} run past the end of the "
            f"data ({data_bytes:,} bytes)"
        )
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise BadInput(
            f"tensor {_short(name)}: {offsets[1] - offsets[0]:,} bytes for shape {shape} of "
            f"{dtype} ({expected:,} bytes)"
        )


def _short(value: object) -> str:
    """``repr(value)`` cut to a line: a header's names and lists can be megabytes long."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _whole_numbers(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    )
