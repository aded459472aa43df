from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ddpimg.train.tasks.gpt.config import SIZES, GptConfig
from ddpimg.train.tasks.gpt.model import Gpt


def test_124m_is_gpt2_small() -> None:
    with torch.device("meta"):
        model = Gpt(SIZES["124m"].shape)
    # nanoGPT's GPT-2 small with the vocabulary padded to 50304, the embedding counted once.
    assert model.num_parameters() == SIZES["124m"].shape.parameters == 124_475_904
    assert model.config.vocab_size == 50257
    assert len(model.h) == 12
    assert model.config.block_size == 1024


def test_output_projection_is_tied_to_the_embedding() -> None:
    model = Gpt(SIZES["tiny"].shape)
    assert model.lm_head.weight is model.wte.weight
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


def test_initialisation_is_gpt2s() -> None:
    torch.manual_seed(0)
    config = GptConfig(n_layer=8, n_head=4, n_embd=256, block_size=16, vocab_size=512)
    model = Gpt(config)
    block = model.h[0]
    # A sample's std over 65,536+ weights: rel 0.05 is 18 of its standard deviations; torch's
    # default init (about 0.036) or an unscaled residual (0.02) miss by 75% or more.
    assert float(block.attn.c_attn.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    residual = 0.02 / math.sqrt(2 * 8)
    assert float(block.attn.c_proj.weight.detach().std()) == pytest.approx(residual, rel=0.05)
    assert float(block.mlp.c_proj.weight.detach().std()) == pytest.approx(residual, rel=0.05)
    assert float(block.mlp.c_fc.bias.detach().abs().max()) == 0.0


def test_logits_have_the_vocabulary_and_are_causal() -> None:
    torch.manual_seed(0)
    model = Gpt(SIZES["tiny"].shape).eval()
    tokens = torch.randint(256, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 256
    with torch.no_grad():
        logits, other = model(tokens), model(changed)
    assert logits.shape == (2, 10, 256)
    assert torch.equal(logits[:, :6], other[:, :6])
    assert not torch.allclose(logits[:, 6:], other[:, 6:])


def test_the_padded_vocabulary_is_never_predicted_and_gets_no_gradient() -> None:
    torch.manual_seed(0)
    shape = GptConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=100)
    model = Gpt(shape)
    assert model.wte.weight.shape == (128, 16)
    tokens = torch.randint(100, (4, 8))
    logits = model(tokens)
    assert logits.shape == (4, 8, 100)
    # Padding rows that would win every softmax if they took part change nothing.
    with torch.no_grad():
        model.wte.weight[100:] = 10.0
    assert torch.equal(model(tokens), logits)
    F.cross_entropy(model(tokens).flatten(0, 1), torch.randint(100, (32,))).backward()
    grad = model.wte.weight.grad
    assert grad is not None
    assert int(torch.count_nonzero(grad[100:])) == 0
    assert int(torch.count_nonzero(grad[:100])) > 0


def test_an_empty_batch_goes_through() -> None:
    # Sharded evaluation gives some ranks empty batches; FSDP still runs their forward.
    logits = Gpt(SIZES["tiny"].shape)(torch.zeros((0, 64), dtype=torch.long))
    assert logits.shape == (0, 64, 256)


def test_context_is_enforced() -> None:
    with pytest.raises(ValueError, match="65 tokens exceed the context of 64"):
        Gpt(SIZES["tiny"].shape)(torch.zeros((1, 65), dtype=torch.long))


def test_flops_per_token_follow_palm() -> None:
    with torch.device("meta"):
        model = Gpt(SIZES["124m"].shape)
    weights = 124_475_904 - 1024 * 768
    assert model.flops_per_token(1024) == 6 * weights + 12 * 12 * 12 * 64 * 1024
    assert model.flops_per_token(512) < model.flops_per_token(1024)
