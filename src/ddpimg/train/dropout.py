"""Dropout and stochastic depth whose masks do not depend on how the global batch is split
over ranks.

``torch.nn.Dropout`` draws from the rank's own RNG stream, so 1 process and N processes drop
different units and their losses part ways. ``GlobalBatchDropout`` instead computes each
unit's draw from where it is: a counter-based hash of (seed, step, layer, the sample's row in
the global batch, the unit's index in the sample). The same sample at the same step gets the
same mask on any topology and in any micro-batch, and a forward pass computes only its own
rows, so the cost follows the micro-batch, not the global batch. ``GlobalStochasticDepth``
does the same for torchvision's ``StochasticDepth`` (a residual branch dropped per sample, or
for the whole batch), which ConvNeXt, EfficientNet, Swin and others use.

The draws (``unit_draws``) are integer arithmetic on int64 tensors, vectorised over rows and
units: no generator, no loop over rows. With (k0, k1) two 32-bit keys, g the row in the
global batch, j the unit's flat index in its sample, and every value a 32-bit word:

    row key   r = permute((g mod 2**32) ^ k0 ^ ((g >> 32) * G mod 2**32))
    unit key  u = permute(j ^ k1)
    draw      w = (r ^ u) * A mod 2**32;  d = (w ^ (w >> 15)) * B mod 2**32

and a unit is kept when d >= p * 2**32 (probability 1 - p). ``permute`` is a three-round
xorshift-multiply permutation and A, B the multipliers of a two-round one, both from Chris
Wellons' hash prospector (github.com/skeeto/hash-prospector, README, "More 3-round
constants" and "More 2-round constants"), chosen among those whose multipliers are below
2**31: a word times one stays below 2**63, so no operation overflows or depends on a sign,
and the numbers are the same on the CPU and CUDA, in every kernel's vector width, eager or
compiled. The keys of rows and units are hashed in full (one value a row, one a unit); the
draw, computed for every unit of every row, is the core of the two-round function (its first
xorshift adds nothing on uniform keys, its last nothing where the whole word is compared).
Two units of one draw share a value only through a collision of 32-bit words, about as
often as a generator's 32-bit draws repeat.

Dropout keys its draws by (seed, step, layer): (k0, k1) = ``derive_words(seed, "dropout",
step, layer)``. Stochastic depth in row mode draws once a row and layer: all of a model's
layers take their draws from one (rows x layers) draw a pass, keyed by (seed, step) with the
layer as the unit, which the context computes on the first layer's call (a dozen layers
then cost one small draw instead of a dozen).

The masks of earlier versions were other numbers (a generator per row from 2026-11-29; one
generator for the whole global batch before): a run resumed across such a change continues
with other masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from ddpimg.train.seeding import derive_words

WORD = 0xFFFFFFFF
# What a draw's word counts in: a unit is kept when its word is at least p times this.
DRAW_RANGE = 2**32
# hash-prospector's 3-round [16 236f7153 12 33cd8663 15 3e06b66b 16] (bias 0.0213): shifts and
# multipliers, alternating.
_PERMUTE = (16, 0x236F7153, 12, 0x33CD8663, 15, 0x3E06B66B, 16)
# The two multipliers and the middle shift of its 2-round [16 604baa5d 15 43d6ce97 15] (bias
# 0.1649).
_DRAW = (0x604BAA5D, 15, 0x43D6CE97)
# Folds a row's high word into its key (odd; the high word of a row is below 2**31).
_HIGH_ROW = 0x9E3779B1


@dataclass(frozen=True)
class BatchPosition:
    """Where the current forward pass sits: optimizer step (from 1), the pass's first row
    in the global batch (this rank's share, or the micro-batch's within it), and the global
    batch size."""

    step: int
    offset: int
    global_batch: int


class DropoutContext:
    """Shared by the loop (which sets ``position`` before each training forward) and the
    model's random layers (which read it, and drop through ``drop``)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.position: BatchPosition | None = None
        # Stochastic-depth layers draw from one (rows x row_layers) draw a pass (the module's
        # docstring); each registers its layer number.
        self.row_layers = 0
        self._row_draws: tuple[tuple[object, ...], torch.Tensor] | None = None
        self.drop: _Drop = _dropped

    def keep_outside_graphs(self) -> None:
        """Before the model is compiled (``--compile``): the layers then drop eagerly, dynamo
        breaking the graph around them, and compile once for all layers. Traced, the masks'
        keys (the step and the pass's row offset, Python integers hashed with blake2b) would
        be guarded on and change every pass, and each layer's own numbers (its ``p``, its
        layer) would compile it once a layer: a recompile each step, and past dynamo's limit
        of 8 recompiles with more than a few layers, eager anyway. Imports torch._dynamo
        (torch.compiler.disable)."""
        # torch.compiler.disable carries no annotations (torch 2.14).
        self.drop = cast("_Drop", torch.compiler.disable(_dropped))  # type: ignore[no-untyped-call]

    def kept_units(
        self, layer: int, rows: int | None, tail: Sequence[int], p: float, device: torch.device
    ) -> torch.Tensor:
        """Dropout's keep mask (bool, shape (rows, *tail)) of ``layer`` for this pass's
        ``rows``, each unit kept with probability 1 - ``p``. ``rows`` None: one mask for the
        whole global batch (its first row's: the same on every rank and in every
        micro-batch), shape (1, *tail)."""
        position = self._position()
        first, count = (0, 1) if rows is None else (position.offset, rows)
        _check_rows(position, first, count)
        keys = derive_words(self.seed, "dropout", position.step, layer)
        draws = unit_draws(keys, first, count, math.prod(tail), device)
        return (draws >= threshold(p)).view(count, *tail)

    def kept_rows(self, layer: int, rows: int, p: float, device: torch.device) -> torch.Tensor:
        """Stochastic depth's keep mask (bool, shape (rows,)) of ``layer`` for this pass's
        rows: column ``layer`` of the pass's (rows x layers) draw, made on the pass's first
        call."""
        position = self._position()
        _check_rows(position, position.offset, rows)
        layers = max(self.row_layers, layer + 1)
        made = (position, rows, layers, device)
        if self._row_draws is None or self._row_draws[0] != made:
            keys = derive_words(self.seed, "stochastic depth", position.step)
            self._row_draws = made, unit_draws(keys, position.offset, rows, layers, device)
        return self._row_draws[1][:, layer] >= threshold(p)

    def _position(self) -> BatchPosition:
        if self.position is None:
            raise RuntimeError("a global-batch random layer ran in training mode before a position")
        return self.position


class GlobalBatchDropout(nn.Module):
    """Dropout with probability ``p``; ``layer`` tells the layers of one model apart."""

    def __init__(self, p: float, layer: int, context: DropoutContext) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.layer = layer
        self.context = context

    def extra_repr(self) -> str:
        return f"p={self.p}, layer={self.layer}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Nothing of this layer's own is read here (``keep_outside_graphs``).
        return self.context.drop(self, x) if self.training else x

    def dropped(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with this pass's units dropped and the survivors scaled by 1 / (1 - p)."""
        if self.p == 0:
            return x
        keep = self.context.kept_units(self.layer, x.shape[0], x.shape[1:], self.p, x.device)
        return x * keep.to(x.dtype) / (1 - self.p)


class GlobalStochasticDepth(nn.Module):
    """torchvision's ``StochasticDepth(p, mode)``: in ``row`` mode each sample's input is
    zeroed with probability ``p``, in ``batch`` mode the whole batch's; survivors are scaled
    by 1 / (1 - p)."""

    def __init__(self, p: float, mode: str, layer: int, context: DropoutContext) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"drop probability must be in [0, 1], got {p}")
        if mode not in ("row", "batch"):
            raise ValueError(f"mode must be 'row' or 'batch', got {mode!r}")
        self.p = p
        self.mode = mode
        self.layer = layer
        self.context = context
        if mode == "row":
            context.row_layers = max(context.row_layers, layer + 1)

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}, layer={self.layer}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Nothing of this layer's own is read here (``keep_outside_graphs``).
        return self.context.drop(self, x) if self.training else x

    def dropped(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with this pass's rows (or the whole batch) dropped, survivors scaled."""
        if self.p == 0:
            return x
        ones = (1,) * (x.dim() - 1)
        if self.mode == "row":
            rows = self.context.kept_rows(self.layer, x.shape[0], self.p, x.device)
            keep = rows.view(-1, *ones)
        else:
            keep = self.context.kept_units(self.layer, None, ones, self.p, x.device)
        survival = 1.0 - self.p
        scaled = keep.to(x.dtype)
        return x * (scaled / survival if survival > 0 else scaled)


RandomLayer = GlobalBatchDropout | GlobalStochasticDepth
_Drop = Callable[[RandomLayer, torch.Tensor], torch.Tensor]


def _dropped(layer: RandomLayer, x: torch.Tensor) -> torch.Tensor:
    return layer.dropped(x)


def threshold(p: float) -> int:
    """The least word kept with drop probability ``p`` (p * 2**32 is exact in float64)."""
    return math.ceil(p * DRAW_RANGE)


def _check_rows(position: BatchPosition, first: int, count: int) -> None:
    if first + count > position.global_batch:
        raise RuntimeError(
            f"rows {first}..{first + count} are outside the global batch of {position.global_batch}"
        )


def unit_draws(
    keys: tuple[int, int], first: int, rows: int, units: int, device: torch.device
) -> torch.Tensor:
    """The draws (int64 words below 2**32, shape (rows, units)) of global rows first ..
    first + rows - 1 and units 0 .. units - 1 under ``keys`` (two 32-bit words): the
    module's docstring gives the function."""
    k0, k1 = keys
    row = torch.arange(first, first + rows, dtype=torch.int64, device=device)
    if first + rows > DRAW_RANGE:  # rows past 2**32: their high word joins the key
        row = (row & WORD) ^ (((row >> 32) * _HIGH_ROW) & WORD)
    unit = torch.arange(units, dtype=torch.int64, device=device)
    # Rows and units through one permutation: half the small operations of two.
    keys_of = _permute(torch.cat((row ^ k0, unit ^ k1)))
    first_multiplier, shift, second_multiplier = _DRAW
    # In place from here: one tensor of the full size (and the shift's temporary).
    words = keys_of[:rows, None] ^ keys_of[None, rows:]
    words.mul_(first_multiplier).bitwise_and_(WORD)
    words.bitwise_xor_(words >> shift)
    words.mul_(second_multiplier).bitwise_and_(WORD)
    return words


def _permute(words: torch.Tensor) -> torch.Tensor:
    """hash-prospector's three-round permutation of 32-bit words (``_PERMUTE``)."""
    words = words ^ (words >> _PERMUTE[0])
    for index in range(1, len(_PERMUTE), 2):
        words = (words * _PERMUTE[index]) & WORD
        words = words ^ (words >> _PERMUTE[index + 1])
    return words
