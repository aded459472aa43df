"""A causal-language-model fine-tune in the style of Hugging Face's ``run_clm.py``, the CSC
tutorial's Transformers benchmark, small enough for a CPU: a tokenizer, a text file
tokenized and grouped into blocks, a GPT-2 and transformers' ``Trainer``.

    train --script hf_clm.py TEXT_FILE OUT_DIR [--model DIR] [--steps N] [--deepspeed CFG]

The tokenizer is a byte-level BPE trained on the text file itself (no download); the model
is a small random GPT-2, or ``--model DIR`` (a Hugging Face GPT-2 directory, e.g. one
written by ``ddpimg export``). Each rank writes ``OUT_DIR/rank<N>.json``: the rank and world
size the launch gave it, what the Trainer made of them, the losses and a checksum of the
weights (the same on every rank when gradients were averaged).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

EOS = "<|endoftext|>"


def make_tokenizer(lines: list[str]) -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=320, min_frequency=2, special_tokens=[EOS])
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token=EOS)


def group_texts(ids: list[list[int]], block_size: int) -> list[dict[str, torch.Tensor]]:
    """run_clm's ``group_texts``: concatenate, drop the remainder, cut into blocks."""
    joined = [token for line in ids for token in line]
    usable = len(joined) // block_size * block_size
    blocks = [joined[i : i + block_size] for i in range(0, usable, block_size)]
    return [{"input_ids": torch.tensor(block), "labels": torch.tensor(block)} for block in blocks]


class Losses(TrainerCallback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("text", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--deepspeed")
    # run_clm.py's TrainingArguments: --save_steps and --resume_from_checkpoint.
    parser.add_argument("--save-steps", type=int, default=0)
    parser.add_argument("--resume")
    # DeepSpeed's launcher passes --local_rank=N to the script.
    parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
    args = parser.parse_args()

    lines = [line for line in args.text.read_text(encoding="utf-8").splitlines() if line]
    tokenizer = make_tokenizer(lines)
    ids = tokenizer([line + EOS for line in lines])["input_ids"]
    dataset = group_texts(ids, args.block_size)
    if args.model is not None:
        model = GPT2LMHeadModel.from_pretrained(args.model)
    else:
        torch.manual_seed(0)
        config = GPT2Config(
            vocab_size=len(tokenizer), n_positions=args.block_size, n_embd=32, n_layer=2,
            n_head=2, bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        )  # fmt: skip
        model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=str(args.out / "trainer"),
        per_device_train_batch_size=4,
        max_steps=args.steps,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        ddp_backend=None if torch.cuda.is_available() else "gloo",
        deepspeed=args.deepspeed,
        seed=0,
    )
    losses = Losses()
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=dataset,
        data_collator=default_data_collator,
        callbacks=[losses],
    )
    trainer.train(resume_from_checkpoint=args.resume)
    checksum = sum(float(p.detach().double().sum()) for p in trainer.model.parameters())
    report = {
        "rank": int(os.environ.get("RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "process_index": training.process_index,
        "trainer_world_size": training.world_size,
        "distributed": torch.distributed.is_initialized(),
        "deepspeed": trainer.is_deepspeed_enabled,
        "losses": losses.losses,
        "checksum": checksum,
    }
    if not all(math.isfinite(loss) for loss in losses.losses):
        raise SystemExit(f"non-finite loss: {losses.losses}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{training.process_index}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
