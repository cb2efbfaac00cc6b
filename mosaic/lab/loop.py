"""The lab's one training loop (Accelerate), shared by every model family.

A model family supplies a :class:`Task` (the trainable module, the in-memory training tensors, a
``loss(batch)`` step, a ``validate`` hook on the ``val`` split, an ``export`` of weights); the
loop does the rest, in the style of the diffusers training examples: ``Accelerator`` for device,
precision and processes, AdamW with warm-up, gradient clipping and accumulation, EMA
(diffusers ``EMAModel``), checkpoints with exact resume (safetensors + JSON, :mod:`mosaic.lab.checkpoint`: nothing is unpickled), JSONL/CSV logs, a tqdm
bar on the main process, a NaN stop, and checkpoint selection on ``val`` (seen combinations only).
It writes into a run folder (:class:`~mosaic.lab.run_folder.RunFolder`, whose module docstring lists
the files).

Randomness of each micro-step (its batch, noise, timesteps, condition dropout, dropout layers)
is a pure function of ``(training.seed, micro-step, process rank)``, so a run resumed from a
checkpoint computes exactly the losses of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Callable

import torch

from mosaic.errors import ConfigError, TrainingError
from mosaic.io import atomic_dir, clear_temps, discard, new_temp_dir, own_folders, replace_path
from mosaic.lab.config import TrainingSection
from mosaic.lab.data import BatchPlan, step_seed
from mosaic.lab.checkpoint import (
    RECORD, WEIGHTS_RECORD, CheckpointError, check_weights_meaning, foreign_file, load_checkpoint, read_weights_record,
    save_checkpoint as write_checkpoint, trained_with, write_weights_record,
)
from mosaic.lab.run_folder import RunFolder, final_loss


# ----------------------------------------------------------------------------------------------
# the task interface
# ----------------------------------------------------------------------------------------------

class Task:
    """What a model family gives the loop.

    Attributes:
        model: every trainable module, as one ``nn.Module`` whose ``forward`` is the training
            forward (so DDP hooks see it).
        train_source: optional; a :class:`mosaic.stream.StreamSource` the loop takes each
            micro-step's batch from instead of ``train_data`` (``dataset.stream: true``).
        train_data: tensors with a leading example dimension ``N`` (e.g. ``image`` uint8
            ``[N, 3, H, W]``, ``cond`` int64 ``[N, ...]``), kept in memory; a batch is the same
            dict indexed by the batch's indices, moved to the training device.
        selection: ``(metric, "max" | "min")`` chosen among :meth:`validate`'s keys to keep the
            best checkpoint, or None to keep only the last.
    """

    model: torch.nn.Module
    train_data: dict[str, torch.Tensor]
    selection: tuple[str, str] | None = None

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor], generator: torch.Generator) -> torch.Tensor:
        """Scalar float32 loss of one micro-batch. Draw all randomness from ``generator``
        (a ``torch.Generator`` on the batch's device, seeded per micro-step and process)."""
        raise NotImplementedError

    def validate(self, model: torch.nn.Module, accelerator) -> dict[str, float]:
        """Metrics on the ``val`` split (seen combinations only) with ``model`` unwrapped, in eval
        mode, EMA weights swapped in. Called on every process (split the work with
        ``accelerator.split_between_processes``); the main process's result is logged."""
        return {}

    def weights_meaning(self) -> dict | None:
        """What the exported weights mean beyond their shapes (the config's ``model`` section, as
        JSON), recorded in their ``weights.json`` and compared by every reader
        (:func:`mosaic.lab.checkpoint.check_weights_meaning`); None: nothing recorded."""
        return None

    def export(self, model: torch.nn.Module, out_dir: Path) -> None:
        """Write the weights of ``model`` (unwrapped, EMA weights in) to ``out_dir`` (main process)."""
        from safetensors.torch import save_file

        out_dir.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(out_dir / "model.safetensors"))


# ----------------------------------------------------------------------------------------------
# torch threads, progress bars
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def torch_threads_restored():
    """Restore torch's CPU thread count on exit: ``training.threads`` applies to one run only."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(n)


def progress_kwargs() -> dict:
    """tqdm settings: a live bar on a terminal; into a log file (sweep trials, CI), a line every 30 s."""
    import sys

    return {"dynamic_ncols": True} if sys.stderr.isatty() else {"mininterval": 30.0, "ncols": 100}


# ----------------------------------------------------------------------------------------------
# accelerator
# ----------------------------------------------------------------------------------------------

def check_device(cfg: TrainingSection) -> None:
    """Refuse a training device this machine does not have.

    Raises:
        ConfigError: ``training.device: cuda`` without a CUDA GPU (names the field, the value and the fix).
    """
    if getattr(cfg, "device", "auto") == "cuda" and not torch.cuda.is_available():
        raise ConfigError([("training.device", "cuda, but this machine has no CUDA GPU (torch.cuda.is_available() is False): "
                            "use auto (a GPU when there is one, else the CPU) or cpu, or run on a GPU machine")])


def resolve_precision(cfg: TrainingSection) -> str:
    """``mixed_precision`` with ``auto`` resolved: bf16 on a bf16-capable GPU, else ``no``."""
    if cfg.mixed_precision != "auto":
        return cfg.mixed_precision
    if cfg.device != "cpu" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"


def make_accelerator(cfg: TrainingSection, run_dir: Path):
    """An ``Accelerator`` for a training section (CPU when asked or when there is no GPU).

    Under ``torchrun`` / ``accelerate launch`` it joins the launched processes; on CPU the
    processes talk over gloo. In a single process, an earlier Accelerator's global state is reset
    first so that several runs can train in one Python process (tests, notebooks).
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    check_device(cfg)  # training.device: cuda without a GPU: an error naming the field, before the dataset or run folder
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        AcceleratorState._reset_state(True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cpu = cfg.device == "cpu" or not torch.cuda.is_available()
    if cfg.tensorboard:
        from accelerate.utils import is_tensorboard_available

        if not is_tensorboard_available():
            raise ConfigError([("training.tensorboard", "true, but tensorboard is not installed: `pip install tensorboard`, or set it false")])
    return Accelerator(
        cpu=cpu,
        mixed_precision=resolve_precision(cfg) if not cpu else ("bf16" if cfg.mixed_precision == "bf16" else "no"),
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(Path(run_dir) / "tensorboard"),
                                            automatic_checkpoint_naming=False),
        step_scheduler_with_optimizer=False,
        log_with="tensorboard" if cfg.tensorboard else None,
    )


# ----------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------

def _lr_scheduler(cfg: TrainingSection, optimizer):
    from diffusers.optimization import get_scheduler

    name = {"constant": "constant_with_warmup", "cosine": "cosine", "linear": "linear"}[cfg.lr_schedule]
    return get_scheduler(name, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.steps)


def _better(value: float, best: float | None, mode: str) -> bool:
    if value is None or not math.isfinite(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


def _last_good(run: RunFolder) -> str:
    last = run.latest_checkpoint()
    return f"the last good checkpoint {last} is intact" if last else "no checkpoint was written yet"


def load_latest_good_checkpoint(run: RunFolder, accelerator, state: dict, say: Callable[[str], None],
                               objects: tuple | None = None) -> Path | None:
    """Load the newest checkpoint that reads whole (:func:`mosaic.lab.checkpoint.load_checkpoint`:
    format, this run's id, every file listed with its sha256, safetensors and JSON only, nothing
    unpickled) into ``objects`` = ``(model, optimizer, scheduler, ema)``, and its
    ``trainer_state.json`` into ``state``; returns its folder, or None when the run has none.

    A damaged or foreign checkpoint (another run's, another format such as an accelerate pickle
    checkpoint, a file it does not list, a truncated or altered file) is named, renamed to
    ``<name>.damaged`` by the main process (kept for inspection, never picked again) and the
    previous one is used.

    Raises:
        TrainingError: every checkpoint is damaged or foreign (each named, with what to do).
    """

    model, optimizer, scheduler, ema = objects if objects is not None else (None, None, None, None)
    damaged = []
    run_id = run.run_id()
    for _, ck in reversed(run.checkpoint_list()):
        try:
            st = load_checkpoint(ck, accelerator, model, optimizer, scheduler, ema, run_id)
        except CheckpointError as e:
            reason = str(e.problems[0][1] if getattr(e, "problems", None) else e)
            reason = reason.replace(str(ck) + ": ", "").replace(str(ck) + "/", "")
            damaged.append((str(ck), reason))
            say(f"checkpoint {ck} is damaged ({reason}); trying the previous one")
            if accelerator.is_main_process:
                try:
                    os.replace(ck, ck.with_name(ck.name + ".damaged"))
                except OSError as err:  # e.g. a read-only run folder: said, and read again next time
                    say(f"could not rename {ck} to {ck.name}.damaged ({err.strerror or err}); it stays in place "
                        "and is skipped again on the next resume: move it aside by hand to keep it for inspection")
            continue
        state.update(st)
        if damaged:
            say(f"resuming from {ck} (step {st['step']}) instead of the damaged {', '.join(Path(d).name for d, _ in damaged)}")
        return ck
    if damaged:
        raise TrainingError([(d, f"damaged checkpoint ({why})") for d, why in damaged]
                            + [("", f"no readable checkpoint is left in {run.checkpoints}: delete the run folder {run.root} "
                                    "to start over, or give another --out")])
    return None


def _foreign_export(bad: Path, d: Path) -> TrainingError:
    """The refusal of exporting ``d`` (``best/``, ``final/``) again over ``bad`` (:func:`foreign_file`)."""
    if bad.name == WEIGHTS_RECORD and bad.parent == d:
        return TrainingError([(str(bad), f"is missing or damaged, so nothing tells the files of {d.name}/ from a person's, and exporting "
                               f"{d.name}/ again would delete them: restore it, or move {d} out of the run, then rerun")])
    return TrainingError([(str(bad), f"is not one of the files {d.name}/ was exported with (its {WEIGHTS_RECORD} does not list it), and "
                           f"exporting {d.name}/ again would delete it: move it out of {d}, then rerun")])


def _check_resumed_meaning(task: Task, run: RunFolder) -> None:
    """A resumed run's config must mean what its exported weights (``best/``, ``final/``) were trained
    with (:func:`check_weights_meaning`), and those folders may hold only what was exported (:func:`foreign_file`:
    a person's file there would be deleted by the next export, and so would files beside a missing or damaged record)."""
    meaning = task.weights_meaning()
    for d in (run.best, run.final):
        try:
            rec = read_weights_record(d) if meaning is not None and d.is_dir() else None
        except CheckpointError:
            rec = None
        check_weights_meaning(rec, meaning, run.config, d)
        if (bad := foreign_file(d, WEIGHTS_RECORD)) is not None:  # refused before a step is trained: the export would delete it
            raise _foreign_export(bad, d)


def train(task: Task, cfg: TrainingSection, run: RunFolder, accelerator, on_log: Callable[[str], None] | None = None) -> dict:
    """Train ``task`` for ``cfg.steps`` optimizer steps, resuming from the run's latest checkpoint.

    Every ``log_every`` steps a row goes to ``log.jsonl``/``log.csv``; every ``val_every`` steps
    and at the last step :meth:`Task.validate` runs with EMA weights and, when ``task.selection``
    improves, the weights are exported to ``RUN/best``; every ``checkpoint_every`` steps and at
    the last step :func:`mosaic.lab.checkpoint.save_checkpoint` writes a checkpoint (made atomic by renaming a
    ``.tmp`` folder; the oldest beyond ``keep_checkpoints`` are deleted). At the end the
    (EMA) weights go to ``RUN/final``.

    Returns:
        A summary: ``steps``, ``params``, ``processes``, ``global_batch``, ``mixed_precision``,
        ``device``, ``train_time_s``, ``images_per_s`` (optimizer-step throughput, validation
        and checkpoints excluded), ``final_loss``, ``best`` (``{metric, value, step}``) and the last
        validation metrics ``val``.
    Raises:
        TrainingError: the loss (or gradient norm) is not finite; the message names the step and
            the last good checkpoint, which is left intact.
        DatasetError: the train split is smaller than one global batch.
    """
    from diffusers.training_utils import EMAModel
    from tqdm.auto import tqdm

    say = on_log or (lambda s: None)
    device = accelerator.device
    rank, world = accelerator.process_index, accelerator.num_processes
    model = task.model
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    lr_sched = _lr_scheduler(cfg, optimizer)
    model, optimizer, lr_sched = accelerator.prepare(model, optimizer, lr_sched)
    inner = accelerator.unwrap_model(model)
    ema = None
    if cfg.ema.enabled:
        ema = EMAModel(inner.parameters(), decay=cfg.ema.decay, use_ema_warmup=cfg.ema.warmup, power=cfg.ema.power,
                       update_after_step=cfg.ema.update_after_step)
        ema.to(device)
        accelerator.register_for_checkpointing(ema)

    # training tensors: on the device when they fit comfortably, else pinned host memory; or a
    # stream (mosaic.stream.StreamSource) rendering each micro-step's batch on the fly
    source = getattr(task, "train_source", None)
    if source is not None:
        data, n = {}, len(source)
    else:
        nbytes = sum(t.numel() * t.element_size() for t in task.train_data.values())
        on_device = device.type == "cpu" or nbytes < 4 * 2**30
        data = {k: (v.to(device) if on_device else v.pin_memory()) for k, v in task.train_data.items()}
        n = len(next(iter(data.values())))
    plan = BatchPlan(n, cfg.batch_size, world, rank, cfg.seed)
    global_batch = cfg.batch_size * cfg.grad_accum * world

    state = {"step": 0, "best": None, "best_step": None, "train_time_s": 0.0, "val": {}}
    resumed_at = 0
    _check_resumed_meaning(task, run)
    ckpt = load_latest_good_checkpoint(run, accelerator, state, say, (model, optimizer, lr_sched, ema))
    if ckpt is not None:
        resumed_at = state["step"]
        if accelerator.is_main_process:
            run.truncate_logs(state["step"])
        say(f"resumed from {ckpt} (step {state['step']})")
    elif accelerator.is_main_process:
        run.truncate_logs(0)  # a run killed before its first checkpoint starts over: drop its log rows
    accelerator.wait_for_everyone()

    sel_metric, sel_mode = task.selection if task.selection else (None, None)
    if cfg.tensorboard:
        accelerator.init_trackers("train", config={k: v for k, v in cfg.model_dump(mode="json").items() if isinstance(v, (int, float, str, bool))})

    def swap_in_ema():
        if ema is not None:
            ema.store(inner.parameters())
            ema.copy_to(inner.parameters())

    def swap_out_ema():
        if ema is not None:
            ema.restore(inner.parameters())

    def export(dest: Path):
        if accelerator.is_main_process:
            if (bad := foreign_file(dest, WEIGHTS_RECORD)) is not None:  # replaced whole: a person's file in it is never deleted
                raise _foreign_export(bad, dest)
            clear_temps(dest)  # an interrupted export, or a link planted at its temporary name: removed, never followed
            with atomic_dir(dest) as tmp:  # a unique new folder; what stands at dest (a link) is removed, never written through
                task.export(inner, tmp)
                # the run's id, every file's sha256 and the model section: weights of another run, or read under an edited config, are refused
                write_weights_record(tmp, run.run_id(), task.weights_meaning(), params=params)

    def validate(step: int):
        swap_in_ema()
        inner.eval()
        try:
            with torch.no_grad():
                metrics = task.validate(inner, accelerator)
            if metrics:
                state["val"] = metrics
                improved = sel_metric is not None and _better(metrics.get(sel_metric), state["best"], sel_mode)
                if improved:
                    state["best"], state["best_step"] = float(metrics[sel_metric]), step
                    export(run.best)
                if accelerator.is_main_process:
                    run.append_val({"step": step, **metrics, "best": improved})
                if cfg.tensorboard:
                    accelerator.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)
                say(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float))))
        finally:
            inner.train()
            swap_out_ema()

    def save_checkpoint(step: int):
        accelerator.wait_for_everyone()
        dest = run.checkpoints / f"checkpoint-{step:07d}"
        tmp = None
        failed = None
        try:
            if accelerator.is_main_process:
                own_folders(run.root, ["checkpoints"])  # a link at checkpoints/ is removed: no checkpoint is written elsewhere
                clear_temps(dest)  # an unfinished checkpoint, or a link planted at its name: removed, never followed
                tmp = new_temp_dir(dest)  # unique, made new: nothing is written through a link
            if accelerator.num_processes > 1:  # every process writes its RNG state into the main process's folder
                from accelerate.utils import broadcast_object_list

                tmp = broadcast_object_list([tmp])[0]
            write_checkpoint(tmp, accelerator, model, optimizer, lr_sched, ema, run.run_id(), state)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                replace_path(tmp, dest)  # what stands at dest (a damaged copy, a link) is removed, not followed
                for _, old in run.checkpoint_list()[:-cfg.keep_checkpoints]:
                    if foreign_file(old, RECORD) is None:  # one holding a person's file is kept, never pruned with it
                        discard(old)  # an old checkpoint that will not go is no reason to stop
        except OSError as e:  # a full disk (ENOSPC), a read-only folder: the unfinished checkpoint goes, the last good one stays
            failed = e
            if tmp is not None and accelerator.is_main_process:
                discard(tmp)
        if failed is not None:
            bar.close()
            raise TrainingError([(str(dest), f"saving the checkpoint of step {step} failed: "
                                  f"{failed.strerror or failed}; {_last_good(run)}. Free disk space (or fix the folder), then "
                                  "rerun the same command to resume")]) from None
        accelerator.wait_for_everyone()

    model.train()
    bar = tqdm(total=cfg.steps, initial=state["step"], disable=not accelerator.is_local_main_process, desc="train",
               smoothing=0.05, **progress_kwargs())
    window, window_t0, window_steps = [], time.perf_counter(), 0
    t_train = 0.0
    params_list = [p for p in model.parameters() if p.requires_grad]
    streamed = source.batches(plan, state["step"] * cfg.grad_accum, cfg.steps * cfg.grad_accum) if source is not None else None
    for step in range(state["step"] + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        losses = []
        for micro in range(cfg.grad_accum):
            m = (step - 1) * cfg.grad_accum + micro
            idx = plan.indices(m)
            if streamed is not None:
                batch = {k: v.to(device, non_blocking=True) for k, v in next(streamed).items()}
            else:
                batch = {k: v[idx.to(v.device)].to(device, non_blocking=True) for k, v in data.items()}
            seed = step_seed(cfg.seed, m, rank)
            torch.manual_seed(seed)  # dropout layers and anything else on the global RNG
            gen = torch.Generator(device=device).manual_seed(seed)
            sync = contextlib.nullcontext() if micro == cfg.grad_accum - 1 else accelerator.no_sync(model)
            with sync:
                loss = task.loss(model, batch, gen)
                accelerator.backward(loss / cfg.grad_accum)
            losses.append(loss.detach().float())
        loss_value = accelerator.reduce(torch.stack(losses).mean(), reduction="mean").item()
        if not math.isfinite(loss_value):
            where = _last_good(run)
            bar.close()
            raise TrainingError(
                f"training stopped at step {step}: the loss is {loss_value} (lr {lr_sched.get_last_lr()[0]:.3g}); {where}. "
                "Lower training.lr, raise training.warmup_steps or keep training.grad_clip on, and start a new run (another --out)"
            )
        grad_norm = None
        if cfg.grad_clip is not None:
            grad_norm = float(accelerator.clip_grad_norm_(params_list, cfg.grad_clip))
            if not math.isfinite(grad_norm) and accelerator.mixed_precision != "fp16":
                where = _last_good(run)
                bar.close()
                raise TrainingError(f"training stopped at step {step}: the gradient norm is {grad_norm}; {where}. Lower training.lr")
        optimizer.step()
        lr_sched.step()
        optimizer.zero_grad(set_to_none=True)
        if ema is not None:
            ema.step(inner.parameters())
        if device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        t_train += dt
        state["train_time_s"] += dt
        state["step"] = step
        window.append(loss_value)
        window_steps += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.4f}", refresh=False)  # refresh=True would bypass mininterval and flood logs
        if step % cfg.log_every == 0 or step == cfg.steps:
            el = time.perf_counter() - window_t0
            row = {"step": step, "loss": sum(window) / len(window), "lr": lr_sched.get_last_lr()[0], "grad_norm": grad_norm,
                   "images_per_s": global_batch * window_steps / max(el, 1e-9), "time_s": state["train_time_s"]}
            if accelerator.is_main_process:
                run.append_log(row)
            if cfg.tensorboard:
                accelerator.log({f"train/{k}": v for k, v in row.items() if k != "step" and v is not None}, step=step)
            window, window_steps = [], 0
        if (cfg.val_every and step % cfg.val_every == 0) or step == cfg.steps:
            validate(step)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            save_checkpoint(step)
        if step % cfg.log_every == 0:
            window_t0 = time.perf_counter()
    bar.close()

    swap_in_ema()
    export(run.final)
    swap_out_ema()
    if cfg.tensorboard:
        accelerator.end_training()
    accelerator.wait_for_everyone()
    log = run.read_log() if accelerator.is_main_process else []
    steps_timed = cfg.steps
    # the device and processes the run's last steps trained with: its last checkpoint's (a call that resumed a finished
    # run on another machine trains nothing; it recorded its own, which the run's checkpoint contradicted)
    where = {"device": str(device), "processes": world}
    if ckpt is not None and resumed_at == cfg.steps:
        where.update(trained_with(ckpt))
        global_batch = cfg.batch_size * cfg.grad_accum * where["processes"]
    return {
        "steps": cfg.steps,
        "params": params,
        "processes": where["processes"],
        "global_batch": global_batch,
        "mixed_precision": accelerator.mixed_precision,
        "device": where["device"],
        "train_time_s": state["train_time_s"],
        "images_per_s": global_batch * steps_timed / max(state["train_time_s"], 1e-9),
        "final_loss": final_loss(log, cfg.steps),  # mean of the logged rows of the last 10 % of training
        "best": {"metric": sel_metric, "value": state["best"], "step": state["best_step"]},
        "val": state["val"],
        "resumed_at": resumed_at,
        "train_time_this_call_s": t_train,
    }
