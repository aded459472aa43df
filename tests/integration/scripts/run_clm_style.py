"""A causal-language-model training script in the shape of Hugging Face's
``examples/pytorch/language-modeling/run_clm.py`` (the CSC tutorial's Transformers
benchmark), written for these tests: the same steps and the same APIs, nothing of ddpimg.

    train --script run_clm_style.py --model_name_or_path DIR --train_file train.txt \
        --validation_file valid.txt --output_dir OUT --do_train [--do_eval] [TrainingArguments]

``HfArgumentParser`` over model, data and ``TrainingArguments`` dataclasses; ``datasets``'
``text`` loader; tokenization and ``group_texts`` with ``Dataset.map`` under
``main_process_first``; ``AutoModelForCausalLM`` / ``AutoTokenizer`` from a local directory;
``Trainer`` with ``default_data_collator``; ``trainer.train(resume_from_checkpoint=...)``
(only what ``--resume_from_checkpoint`` says, as run_clm.py does); ``save_model``,
``log_metrics``, ``save_metrics``, ``save_state``; then ``evaluate``.

For the tests, each rank also writes ``OUT/rank<N>.json``: the losses the Trainer logged
(``log_history``), its world as the Trainer saw it, and a checksum of its weights.
``--stop_marker_step N`` makes rank 0 create ``OUT/step-K`` once K optimizer steps are done,
for every K >= N (the tests wait for one before they signal), and ``--step_sleep S`` slows
each step.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import torch
from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "a local model directory"})


@dataclass
class DataTrainingArguments:
    train_file: str = field(metadata={"help": "a .txt file"})
    validation_file: str | None = field(default=None)
    block_size: int = field(default=32)
    max_eval_samples: int | None = field(default=None)
    stop_marker_step: int = field(default=0)
    step_sleep: float = field(default=0.0)


class TestHooks(TrainerCallback):
    """What the tests need to see and steer, nothing of the training itself."""

    def __init__(self, data: DataTrainingArguments, output_dir: str) -> None:
        self.data = data
        self.output_dir = output_dir

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.data.step_sleep:
            time.sleep(self.data.step_sleep)
        marker, step = self.data.stop_marker_step, state.global_step
        if marker and step >= marker and state.is_world_process_zero:
            open(os.path.join(self.output_dir, f"step-{step}"), "w").close()


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)

    data_files = {"train": data_args.train_file}
    if data_args.validation_file is not None:
        data_files["validation"] = data_args.validation_file
    raw_datasets = load_dataset("text", data_files=data_files, keep_linebreaks=True)

    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    column_names = list(raw_datasets["train"].features)
    text_column_name = "text" if "text" in column_names else column_names[0]

    def tokenize_function(examples: dict[str, list[str]]) -> Any:
        return tokenizer(examples[text_column_name])

    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized_datasets = raw_datasets.map(
            tokenize_function, batched=True, remove_columns=column_names
        )
    block_size = data_args.block_size

    def group_texts(examples: dict[str, list[list[int]]]) -> dict[str, list[list[int]]]:
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = len(concatenated[next(iter(examples))])
        total_length = (total_length // block_size) * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="grouping texts together"):
        lm_datasets = tokenized_datasets.map(group_texts, batched=True)

    train_dataset = lm_datasets["train"]
    eval_dataset = None
    if training_args.do_eval:
        eval_dataset = lm_datasets["validation"]
        if data_args.max_eval_samples is not None:
            eval_dataset = eval_dataset.select(range(data_args.max_eval_samples))

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=default_data_collator,
        callbacks=[TestHooks(data_args, training_args.output_dir)],
    )

    if training_args.do_train:
        checkpoint = None
        if training_args.resume_from_checkpoint is not None:
            checkpoint = training_args.resume_from_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["perplexity"] = math.exp(metrics["eval_loss"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)

    losses = {
        entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry
    }
    report = {
        "rank": training_args.process_index,
        "world_size": training_args.world_size,
        "distributed": torch.distributed.is_initialized(),
        "losses": losses,
        "steps": trainer.state.global_step,
        "checksum": sum(float(p.detach().double().sum()) for p in trainer.model.parameters()),
    }
    path = os.path.join(training_args.output_dir, f"rank{training_args.process_index}.json")
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(report, stream)


if __name__ == "__main__":
    main()
