"""``--strategy deepspeed``: a DeepSpeed engine built from the training flags.

The process group already exists (``ddpimg.runtime`` made it), so
``deepspeed.init_distributed`` only adopts it: in DeepSpeed 0.19.8 it returns right after
wrapping the initialised torch.distributed group, before any MPI discovery or
``init_process_group``. The optimizer is the task's own torch optimizer and its learning
rate schedule is stepped by the loop, exactly as with DDP; DeepSpeed averages the gradients
over the data-parallel ranks, as DDP does, so both strategies follow the same trajectory.

Checkpoints are DeepSpeed's own (``engine.save_checkpoint`` on every rank: the module, and
the optimizer state partitioned by ZeRO rank), loaded by DeepSpeed on the same world size;
on another, rank 0 converts them once into ddpimg's universal form (``deepspeed_universal``)
and every rank loads its partition of that (``deepspeed_load``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from ddpimg.errors import DdpimgError
from ddpimg.train.strategies.base import (
    does_not_fit,
    half_dtype,
    with_contiguous_parameters,
    wrapped,
)

if TYPE_CHECKING:
    from pathlib import Path

    import torch
    from torch import nn

    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.strategies.base import OptimizerFactory


# The checkpoint's tag: DeepSpeed writes into <directory>/<tag>/.
CHECKPOINT_TAG = "engine"
# DeepSpeed's own ZeRO bucket size, in elements, and what ZeRO-1/2 want it a multiple of
# (their nccl_start_alignment_factor).
DEFAULT_BUCKET_ELEMENTS = 500_000_000
BUCKET_ALIGNMENT = 2


def deepspeed_config(
    batch: BatchLayout, zero_stage: int, precision: str, num_parameters: int
) -> dict[str, Any]:
    """The DeepSpeed config dict for these flags and a model of ``num_parameters``."""
    # ZeRO-1/2 allocate a whole bucket every step, and deterministic mode fills new memory,
    # so a bucket far larger than the model costs seconds per step on the CPU. ZeRO-1/2
    # also want it a multiple of their start alignment (2 elements: an odd model size
    # failed their initialisation with "allgather_bucket_size must be a multiple of
    # nccl_start_alignment_factor").
    bucket = min(DEFAULT_BUCKET_ELEMENTS, num_parameters + num_parameters % BUCKET_ALIGNMENT)
    return {
        "train_batch_size": batch.global_size,
        "train_micro_batch_size_per_gpu": batch.micro,
        "gradient_accumulation_steps": batch.accumulation,
        "zero_optimization": {
            "stage": zero_stage,
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
        },
        "bf16": {"enabled": precision == "bf16"},
        # loss_scale 0: dynamic loss scaling, as torch's GradScaler does for ddp and fsdp.
        "fp16": {"enabled": precision == "fp16", "loss_scale": 0},
        # DeepSpeed 0.19.8 casts only the parameters to bf16/fp16 unless told otherwise, and a
        # BatchNorm with half weights and float32 running statistics fails on the CPU and the
        # GPU (``expected scalar type BFloat16 but found Float``); the buffers follow the
        # parameters, as DeepSpeed's ``module.bfloat16()`` made them before (the bundled
        # trainers' only floating buffers are BatchNorm's).
        **({"data_types": {"buffer_dtype": precision}} if precision in ("bf16", "fp16") else {}),
        # DeepSpeed 0.19.8 clips gradients to norm 1.0 unless told otherwise; DDP does not clip,
        # and both strategies must follow the same trajectory.
        "gradient_clipping": 0.0,
        # The bundled trainers use their tutorials' optimizers (Adadelta for MNIST), which
        # ZeRO handles like any torch optimizer but does not list as tested.
        "zero_allow_untested_optimizer": True,
    }


def inputs_cast_to(dtype: torch.dtype) -> Callable[[nn.Module, tuple[Any, ...]], tuple[Any, ...]]:
    """A forward pre-hook that casts the floating-point tensors among a call's positional
    inputs to ``dtype``. With bf16 or fp16 on, DeepSpeed casts the module's parameters to it
    and switches off an autocast around the engine's forward (DeepSpeed 0.19.8,
    ``runtime/torch_autocast.autocast_if_enabled``, whose check reads the CUDA autocast: on
    the CPU the loop's autocast stays on), so on a GPU float32 images met bf16 weights
    (``Input type (float) and bias type (c10::BFloat16) should be the same``). Token ids are
    not floating point and pass unchanged. On the CPU the first layer's autocast
    made the same cast, so the CPU trajectory is unchanged."""

    def cast(module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        import torch

        return tuple(
            value.to(dtype)
            if isinstance(value, torch.Tensor) and value.is_floating_point()
            else value
            for value in inputs
        )

    return cast


def hooks_outside_graphs(module: nn.Module) -> int:
    """Make DeepSpeed's module hooks in ``module`` (every submodule's) run eagerly under
    torch.compile, dynamo breaking the graph around them; returns how many there were.

    ZeRO-3 hooks every submodule: before its forward it gathers the parameters, after it
    releases them and wraps the outputs in autograd functions that fetch them again for the
    backward. Traced, each hook is guarded on what it is called with: the submodule (its
    ``ds_id``, its class), the output's shape, the grad mode, and a bound method made anew on
    each call (``module.pre_bwd_fn.apply``, a recompile every call). DeepSpeed 0.19.8 leaves
    two of them to dynamo (the post-forward and pre-backward hooks), so one code object
    compiles once per submodule and call and reaches dynamo's limit of 8 recompiles within
    the first steps, after which it runs eagerly anyway. Marking the guarded values dynamic
    cannot help (a new object each call) and a higher limit only recompiles longer; the
    hooks do communication and bookkeeping that a graph does not speed up. Eager, they
    leave each submodule's computation to compile once per shape and mode: no recompile
    after the first step (tests/train/strategies/test_deepspeed.py). ZeRO 0-2 hook only the
    root module (the engine's forward prologue and epilogue), which this keeps eager too."""
    import torch

    disable = cast("Callable[[Callable[..., Any]], Callable[..., Any]]", torch.compiler.disable)
    count = 0
    for submodule in module.modules():
        for hooks in (submodule._forward_pre_hooks, submodule._forward_hooks):
            for key, hook in list(hooks.items()):
                ours = getattr(hook, "__module__", "").startswith("deepspeed.")
                if ours and not getattr(hook, "_torchdynamo_disable", False):
                    hooks[key] = disable(hook)
                    count += 1
    return count


class DeepSpeedStrategy:
    name = "deepspeed"

    def __init__(self, config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> None:
        self.ctx = ctx
        self.batch = batch
        self.zero_stage = config.zero_stage
        self.precision = config.precision
        self._engine: Any = None
        self._optimizer: torch.optim.Optimizer | None = None

    def wrap(self, model: nn.Module, make_optimizer: OptimizerFactory) -> nn.Module:
        try:
            import deepspeed
        except ImportError as err:
            raise DdpimgError(
                f"--strategy deepspeed needs DeepSpeed, which cannot be imported ({err})",
                hint="run inside the ddpimg image, or pip install deepspeed",
            ) from err
        if self.precision == "fp16":
            from deepspeed.accelerator import get_accelerator

            accelerator = get_accelerator()
            if not accelerator.is_fp16_supported():
                raise DdpimgError(
                    f"--precision fp16 with --strategy deepspeed: DeepSpeed's "
                    f"{accelerator.device_name()} accelerator does not support fp16 here",
                    hint="use --precision bf16 (or fp32) with deepspeed on this device, or "
                    "--strategy ddp / fsdp for fp16",
                )
        # DeepSpeed reads the local rank from the environment, not from its arguments.
        if "LOCAL_RANK" not in os.environ and "OMPI_COMM_WORLD_LOCAL_RANK" not in os.environ:
            raise DdpimgError(
                "--strategy deepspeed needs LOCAL_RANK in the environment, which is unset",
                hint="start through `train` (it exports LOCAL_RANK), or export LOCAL_RANK",
            )
        deepspeed.init_distributed(dist_backend=self.ctx.backend, auto_mpi_discovery=False)
        if self.ctx.device.type == "cpu":
            import torch.distributed as dist

            from ddpimg.runtime.deepspeed_shm import release_buffers

            dist.barrier()  # every rank has mapped every other rank's buffer
            release_buffers(self.ctx.rank)
        # device_rank makes DeepSpeed use the GPU the runtime bound, which is not the local
        # rank when every task sees only its own GPU.
        args = (
            SimpleNamespace(device_rank=self.ctx.device.index)
            if self.ctx.device.type == "cuda"
            else None
        )
        model = with_contiguous_parameters(model)
        config = deepspeed_config(
            self.batch,
            self.zero_stage,
            self.precision,
            sum(parameter.numel() for parameter in model.parameters()),
        )
        # DeepSpeed takes a torch optimizer over the module's full parameters and partitions
        # its state itself (ZeRO).
        self._optimizer = make_optimizer(model)
        engine, _, _, _ = deepspeed.initialize(
            args=args, model=model, optimizer=self._optimizer, config=config
        )
        from ddpimg.train.strategies.deepspeed_files import use_safe_loading

        use_safe_loading(engine)
        half = half_dtype(self.precision)
        if half is not None:
            engine.register_forward_pre_hook(inputs_cast_to(half))
        self._engine = engine
        module: nn.Module = engine
        return module

    def compile(self, backend: str) -> None:
        # DeepSpeed's own: it compiles the engine's module in place (nn.Module.compile) and
        # turns off what would break the graph; its hooks run eagerly between the graphs.
        hooks_outside_graphs(self.engine.module)
        self.engine.compile(backend=backend)

    def micro_batch(self, last: bool) -> AbstractContextManager[None]:
        # The boundary is set, not counted: DeepSpeed's own micro-step counter would count
        # from the checkpoint's micro-steps after a resume with another accumulation.
        self.engine.set_gradient_accumulation_boundary(last)
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        # The loss is already the micro-batch's share of the step's (scale_wrt_gas: DeepSpeed
        # would divide it by the accumulation steps again).
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> None:
        """The update, after the last micro-batch's backward (the boundary is set)."""
        self.engine.step()

    def zero_grad(self) -> None:
        """Nothing to do: ``engine.step()`` already cleared the gradients."""

    def save(self, directory: Path) -> None:
        # No 'latest' file: the checkpoint module decides which checkpoint is the latest.
        self.engine.save_checkpoint(str(directory), tag=CHECKPOINT_TAG, save_latest=False)

    def load(self, directory: Path, saved_world_size: int) -> None:
        """DeepSpeed's own load on the world size that wrote the checkpoint (exact), and
        with ZeRO-0, whose files hold everything unpartitioned; through the universal form
        (``deepspeed_universal``) on any other."""
        if saved_world_size != self.ctx.world_size and self.zero_stage > 0:
            self._load_universal(directory, saved_world_size)
            return
        # The learning-rate schedule is the loop's, restored by the checkpoint module.
        try:
            loaded, _ = self.engine.load_checkpoint(
                str(directory),
                tag=CHECKPOINT_TAG,
                load_optimizer_states=True,
                load_lr_scheduler_states=False,
            )
        except (KeyError, RuntimeError, ValueError) as err:
            same = "the trainer, model flags, world size and --zero-stage"
            raise does_not_fit(directory, str(err), same=same) from err
        if loaded is None:
            raise DdpimgError(
                f"checkpoint {directory}: DeepSpeed found no engine checkpoint "
                f"{CHECKPOINT_TAG!r} in it",
                hint="resume from a checkpoint written with --strategy deepspeed, or --resume none",
            )

    def _load_universal(self, directory: Path, saved_world_size: int) -> None:
        """Rank 0 converts the checkpoint (once: kept beside it) and tells every rank how
        that went; then every rank loads its own partition of it."""
        from ddpimg.train.coordination import prepare_on_main
        from ddpimg.train.strategies import deepspeed_universal
        from ddpimg.train.strategies.deepspeed_load import load_universal

        def convert() -> None:
            print(
                f"ddpimg: resuming DeepSpeed ZeRO-{self.zero_stage} on {self.ctx.world_size} "
                f"ranks from a checkpoint of {saved_world_size}: through its universal form in "
                f"{directory / deepspeed_universal.UNIVERSAL}",
                file=sys.stderr,
                flush=True,
            )
            deepspeed_universal.make_universal(directory, CHECKPOINT_TAG)

        prepare_on_main(self.ctx, convert)
        universal = deepspeed_universal.read(directory / deepspeed_universal.UNIVERSAL)
        load_universal(self.engine, universal, directory, self.ctx.rank)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return wrapped(self._optimizer, "DeepSpeedStrategy")

    @property
    def engine(self) -> Any:
        return wrapped(self._engine, "DeepSpeedStrategy")
