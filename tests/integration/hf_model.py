"""A tiny local GPT-2 and text files for Hugging Face scripts: nothing is downloaded. The
tokenizer is a byte-level BPE trained on the text itself and saved as ``tokenizer.json``
(``GPT2TokenizerFast(vocab_file, merges_file)`` loads an empty vocabulary in transformers
5.x; ``PreTrainedTokenizerFast(tokenizer_file=...)`` does not)."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "then", "dog", "ran", "to", "hall")
EOS = "<|endoftext|>"


def write_text(path: Path, lines: int, seed: int) -> Path:
    """``lines`` lines of 5-20 random words."""
    rng = random.Random(seed)
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def tiny_gpt2(directory: Path, text: Path, block_size: int = 32) -> Path:
    """A random 2-layer GPT-2 with a tokenizer trained on ``text``, saved in ``directory``."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    lines = [line for line in text.read_text(encoding="utf-8").splitlines() if line]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=320, min_frequency=2, special_tokens=[EOS])
    directory.mkdir(parents=True, exist_ok=True)
    bpe.save(str(directory / "tokenizer.json"))
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_file=str(directory / "tokenizer.json"),
        eos_token=EOS,
        model_max_length=block_size,
    )
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=block_size, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory
