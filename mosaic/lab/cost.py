"""What a run costs, before it runs: parameters, FLOPs, memory and wall time (``--dry-run``).

:func:`estimate_run` takes a validated diffusion or transformer config and returns an
:class:`Estimate`; :func:`mosaic.lab.cost_table.render_estimate` turns it into rich tables. Nothing is written to disk:
the dataset is not generated (the spec, with its overrides, is validated and a few of its records
are sampled in memory), no run folder is made.

How each number is obtained (docs/gpu.md, "Cost estimate"); the counting is :mod:`mosaic.lab.flops`, the
run's model and loss without a dataset :mod:`mosaic.lab.probe`, the timing :mod:`mosaic.lab.timing`
and the tables :mod:`mosaic.lab.cost_table`:

- **parameters**: the model the run would build (the same ``build_backbone`` / ``make_encoder`` /
  conditioner code), counted.
- **training FLOPs per image**: ``torch.utils.flop_counter.FlopCounterMode`` around one
  training step of the task's own ``loss`` (forward, loss, backward), divided by its
  :data:`PROBE_BATCH` images (exact: every op of these models is linear in the batch), run on
  fake tensors (``FakeTensorMode``: shapes only, no compute, no memory), so a 90 M-parameter model
  costs the same few seconds as a tiny one. FLOPs of matrix products, convolutions and attention
  (CPU SDPA kernels are registered here); element-wise ops are not counted (the usual convention
  of MFU). The binding objective builds its queries with data-dependent shapes
  (``torch.unique``), which fake tensors cannot run: it is counted on real tensors instead.
- **peak memory per process**: the bytes of the distinct tensor storages autograd saves for the
  backward pass (``torch.autograd.graph.saved_tensors_hooks``; parameters excluded), measured on
  the same fake step of :data:`PROBE_BATCH` images in the precision the run would use on an
  accelerator (CPU autocast stands in for CUDA autocast) and split into ``a1`` per image (saved
  tensors whose leading dimension is a multiple of the batch) and ``a0`` per step (the rest, e.g.
  autocast's bf16 copies of the weights), then scaled linearly to the config's batch:
  ``a0 + a1 * batch``. For this machine's CPU the same count is taken on the real timing step.
  Added: ``4 P`` weights, ``4 P`` gradients, ``8 P`` AdamW moments, ``4 P`` EMA weights (when
  enabled), the training tensors the loop moves to the device when they are under 4 GiB, and a
  fixed reserve (:data:`RESERVE_BYTES`: CUDA context, cuBLAS workspace, allocator slack). On the
  MOSAIC-scale DiT the saved-tensor count matched ``torch.distributed._tools.mem_tracker``'s
  activation total within 0.1 % (480.6 vs 480.1 MiB at batch 2, bf16); MemTracker itself was
  too slow for a dry run (135 s per step on fake tensors).
- **wall time on this machine**: a few real training steps (the task's loss, AdamW, gradient
  clipping, EMA) at the config's batch, or at a smaller batch scaled linearly when one step would
  take long; plus validation, sampling, scoring, the evaluator check and dataset generation from
  measured per-image times (the real sampler `generate` on up to 48 images, forward pass, scene
  parser, render + PNG encode).
- **wall time on accelerators**: total FLOPs / (peak dense bf16 TFLOP/s x assumed MFU), never
  less than a kernel-launch floor (aten ops per step x :data:`LAUNCH_S`); CPU-side scoring as
  measured here. The peak table is :data:`ACCELERATORS`; the MFU is :data:`ASSUMED_MFU` unless
  given.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field

import torch

from mosaic.holdout import HELD_OUT, SEEN
from mosaic.lab.flops import PROBE_BATCH, measure_autoencoder, measure_step
from mosaic.lab.loop import check_device, torch_threads_restored
from mosaic.lab.probe import Probe, make_probe, spec_and_records
from mosaic.lab.timing import side_by_side, time_forward, time_sampling, time_scoring, time_steps

GiB = 2**30


@dataclass(frozen=True)
class Accelerator:
    """One accelerator of the projection table.

    Attributes:
        name: marketing name.
        bf16_tflops: peak dense (no sparsity) bf16 tensor-core TFLOP/s from the vendor's data
            sheet; TF32 (fp32 runs) is taken as half of it.
        memory_gb: memory in GB (10^9 bytes) as the vendor states it.
    """

    name: str
    bf16_tflops: float
    memory_gb: float


#: Peak dense bf16 TFLOP/s and memory of common accelerators (NVIDIA data sheets; dense = without
#: 2:4 sparsity; GeForce: with fp32 accumulation).
ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("H200 SXM", 989.0, 141),
    Accelerator("H100 SXM", 989.0, 80),
    Accelerator("H100 PCIe", 756.0, 80),
    Accelerator("A100 80GB", 312.0, 80),
    Accelerator("A100 40GB", 312.0, 40),
    Accelerator("L40S", 362.0, 48),
    Accelerator("L4", 121.0, 24),
    Accelerator("RTX 4090", 165.2, 24),
)

#: Model FLOPs utilisation assumed for accelerator projections (a fraction of the peak above).
ASSUMED_MFU = 0.30
#: Seconds per launched kernel in eager PyTorch (launch + dispatch), the floor of a GPU step.
LAUNCH_S = 8e-6
#: Memory kept free on an accelerator for the CUDA context, cuBLAS workspace and allocator slack.
RESERVE_BYTES = 1 * GiB
#: Training tensors up to this size are moved to the device by the loop (mosaic.lab.loop.train).
DATA_ON_DEVICE_BYTES = 4 * GiB
#: One CPU timing step may cost at most this many training FLOPs; larger batches are timed smaller and scaled.
CPU_TIMING_FLOPS = 2e10


@dataclass
class AcceleratorRow:
    """The projection of a run on one accelerator (seconds; ``fits`` of the peak memory)."""

    name: str
    peak_tflops: float
    memory_gb: float
    fits: bool
    max_batch: int | None
    train_s: float
    total_s: float


@dataclass
class Estimate:
    """The cost of a run (see the module docstring for how each number is measured).

    FLOPs are floating-point operations (multiply and add counted as 2); bytes are bytes; times
    are seconds. ``per process`` numbers are for one training process at ``batch_size``.
    """

    name: str
    family: str                      # "diffusion (unet)", "transformer (classifier, image)", ...
    params: int
    image_size: int
    batch_size: int
    grad_accum: int
    steps: int
    train_images: int                # examples in the train split
    precision_gpu: str               # bf16 / fp16 / fp32 on an accelerator
    precision_cpu: str               # what the run uses on this machine's CPU
    train_flops_per_image: float     # forward + backward of one image
    forward_flops_per_image: float
    train_flops_per_step: float      # one optimizer step: batch_size * grad_accum images
    train_flops_total: float
    eval_flops_total: float          # validation + sampling / test-split forwards
    eval_images: int                 # images generated (diffusion) or scored (transformer) after training
    ops_per_step: int                # aten ops of one forward + backward (launch floor)
    activation_bytes_fixed: float    # a0 of a0 + a1 * batch (GPU precision)
    activation_bytes_per_image: float
    activation_bytes_per_image_cpu: float
    static_bytes: float              # weights, gradients, AdamW moments, EMA
    data_bytes: float                # training tensors on the device (0 when they stay on the host)
    peak_bytes_gpu: float
    peak_bytes_cpu: float
    cpu_threads: int
    cpu_timed_batch: int
    cpu_step_s: float                # one optimizer step at the config's batch on this machine, as loaded now
    cpu_step_idle_s: float           # the same from process CPU time: the step on this machine when idle
    # the run's phases on this machine with a core per thread (as idle: wall times measured now, scaled by
    # cpu_step_idle_s / cpu_step_s, so that the estimate does not depend on what else runs during the dry run)
    cpu_train_s: float
    cpu_eval_s: float                # validation, sampling, scoring, evaluator check
    cpu_generate_s: float            # dataset generation (0 when the dataset exists)
    cpu_total_s: float
    cpu_load: float                  # 1-minute load average when measured
    assumed_mfu: float
    accelerators: list[AcceleratorRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # latent diffusion (model.latent): the autoencoder's training (0 when cached), the dataset's encoding and the decoding of samples
    autoencoder_params: int = 0
    autoencoder_cached: bool = False
    autoencoder_train_flops: float = 0.0
    autoencoder_encode_flops: float = 0.0
    autoencoder_decode_flops: float = 0.0
    autoencoder_peak_bytes: float = 0.0
    cpu_autoencoder_s: float = 0.0
    cpu_total_loaded_s: float = 0.0  # cpu_total_s at the load of the measurement (>= cpu_total_s)

    @property
    def autoencoder_flops(self) -> float:
        return self.autoencoder_train_flops + self.autoencoder_encode_flops + self.autoencoder_decode_flops

    @property
    def flops_total(self) -> float:
        return self.train_flops_total + self.eval_flops_total + self.autoencoder_flops

    def to_dict(self) -> dict:
        d = asdict(self)
        d["flops_total"] = self.flops_total
        d["autoencoder_flops"] = self.autoencoder_flops
        return d


# ----------------------------------------------------------------------------------------------
# what runs after / around training
# ----------------------------------------------------------------------------------------------


def _eval_splits(spec, wanted: list[str] | None) -> list[str]:
    sizes = spec.split_sizes()
    if wanted:
        return wanted
    tests = [s for s in ("test_id", "test_ood") if s in sizes]
    return tests or (["test"] if "test" in sizes else [])


def _combinations(spec, split: str) -> int:
    """Distinct combinations a split can hold (the holdout grid's seen or held-out cells; else every value tuple)."""
    grid = getattr(spec, "grid", None)
    if grid is not None and split in ("test_id", "test_ood", "val", "train"):
        return grid.count(HELD_OUT if split == "test_ood" else SEEN)
    return math.prod(len(spec.domain(c)) for c in spec.concepts)


def sampled_images(spec, splits: list[str], n_per_combination: int | None) -> int:
    """Images generated for the test splits: ``K`` per combination present, or one per record."""
    sizes = spec.split_sizes()
    total = 0
    for s in splits:
        n = sizes.get(s, 0)
        total += n if n_per_combination is None else min(n, _combinations(spec, s)) * n_per_combination
    return total


# ----------------------------------------------------------------------------------------------
# the estimate
# ----------------------------------------------------------------------------------------------


def _precisions(training) -> tuple[str, str]:
    mp = training.mixed_precision
    gpu = {"auto": "bf16", "bf16": "bf16", "fp16": "fp16", "no": "fp32"}[mp]
    cpu = "bf16" if mp == "bf16" else "fp32"
    return gpu, cpu


def _dtype(precision: str):
    return {"bf16": torch.bfloat16, "fp16": torch.bfloat16, "fp32": None}[precision]


def estimate_run(cfg, *, assumed_mfu: float = ASSUMED_MFU, accelerators: tuple[Accelerator, ...] = ACCELERATORS,
                 time_cpu: bool = True, check_device_present: bool = True, cache: dict | None = None,
                 side_by_side: int = 1) -> Estimate:
    """Estimate the cost of a diffusion or transformer run (``mosaic train ... --dry-run``,
    ``mosaic sweep --dry-run``, ``mosaic reproduce --dry-run``). Writes nothing.

    Args:
        cfg: a validated :class:`~mosaic.lab.diffusion.DiffusionConfig` or
            :class:`~mosaic.lab.transformer.TransformerConfig`.
        assumed_mfu: fraction of an accelerator's peak the projection assumes (default :data:`ASSUMED_MFU`).
        accelerators: the projection table (default :data:`ACCELERATORS`).
        time_cpu: run a few real steps to project the time on this machine (False: FLOPs and memory only).
        check_device_present: refuse ``training.device: cuda`` on a machine without a GPU.
        cache: a dict shared between calls (a sweep): the measurements (FLOPs, memory, step times,
            render and parse times) are taken once per distinct model shape, image size, batch and
            precision, and reused; steps, dataset sizes and sampling settings are each run's own.
        side_by_side: how many such runs share this machine at once (a sweep's trials side by side,
            :func:`mosaic.trials.cpu_slots`): the CPU timings are taken while ``side_by_side - 1``
            other processes train the same model (:func:`mosaic.lab.timing.side_by_side`).
    Returns:
        :class:`Estimate` (FLOPs, bytes, seconds), with ``warnings`` for accelerators whose memory
        the batch does not fit.
    Raises:
        ConfigError: a device that is absent, a model that does not fit the image size, unknown concepts.
        SpecError, DatasetError, TokenizationError: the dataset section does not resolve.
    """
    if check_device_present:
        check_device(cfg.training)
    with torch_threads_restored():
        if cfg.training.threads:
            torch.set_num_threads(cfg.training.threads)
        return _estimate(cfg, assumed_mfu, accelerators, time_cpu, {} if cache is None else cache, max(1, int(side_by_side)))


def shape_key(cfg, spec) -> str:
    """What the expensive measurements depend on: the model sections, the image size and concept
    domains, the batch, precision, threads, EMA and the objective's options (not steps, not
    dataset sizes, not sampling)."""
    d = cfg.model_dump(mode="json")
    keep = {k: d.get(k) for k in ("model", "objective", "input", "classifier", "binding")}
    tr = d["training"]
    keep["training"] = {k: tr.get(k) for k in ("batch_size", "mixed_precision", "threads", "grad_clip")}
    keep["ema"] = tr["ema"]["enabled"]
    keep["image_size"] = spec.image.size
    keep["domains"] = {c: [str(v) for v in spec.domain(c)] for c in spec.concepts}
    return json.dumps(keep, sort_keys=True)


def _scoring_key(spec, evaluator) -> str:
    d = spec.to_dict()
    d.pop("splits", None)
    d.pop("holdout", None)
    return json.dumps([d, evaluator], sort_keys=True, default=str)


def _measure(cfg, probe: Probe, time_cpu: bool, side: int = 1) -> dict:
    """The expensive, shape-dependent numbers of :func:`estimate_run` (see :func:`shape_key`)."""
    tr = cfg.training
    model = probe.model
    B = tr.batch_size
    gpu_prec, cpu_prec = _precisions(tr)
    notes = []
    # FLOPs and activations: one step of PROBE_BATCH images on fake tensors in the accelerator's precision
    if probe.fake_ok:
        bb = PROBE_BATCH
        m = measure_step(model, probe.loss, probe.make_batch(bb), dtype=_dtype(gpu_prec), fake=True)
    else:  # binding: queries per step grow with the batch but not in proportion; count a real step of the batch (capped)
        bb = max(2, min(B, 32))
        m = measure_step(model, probe.loss, probe.make_batch(bb), dtype=_dtype(gpu_prec), fake=False)
        notes.append(f"binding: FLOPs counted on a real step of {bb} scenes and scaled to {B}")
    out = {"family": probe.family, "params": sum(p.numel() for p in model.parameters()), "flops_img": m.flops / bb,
           "fwd_img": m.forward_flops / bb, "ops": m.ops, "a1": m.saved_bytes_batched / bb,
           "a0": m.saved_bytes - m.saved_bytes_batched, "example_bytes": probe.example_bytes, "ema": probe.ema, "notes": notes,
           # on the CPU: measured on the real timing steps below; without them, the accelerator's figure in fp32 (x2 for bf16)
           "a1_cpu": m.saved_bytes_batched / bb * (2 if gpu_prec != cpu_prec else 1), "timed_b": 0, "fb": 0.0, "opt_s": 0.0,
           "fwd_s": 0.0, "sample_s": 0.0, "step_cpu_s": 0.0, "threads": torch.get_num_threads()}
    if time_cpu:
        timed_b = max(1, min(B, int(CPU_TIMING_FLOPS // max(out["flops_img"], 1.0))))
        with side_by_side(cfg, side, timed_b) as companions:
            _time_cpu(cfg, probe, out, timed_b)
        if side > 1:
            notes.append(f"CPU times measured with {companions} other process(es) training the same model side by side"
                         + (f" ({side - 1} asked: the rest did not start)" if companions < side - 1 else "")
                         + f", as {side} trials of a sweep run at once")
        if timed_b < B:
            notes.append(f"CPU time measured at batch {timed_b} and scaled linearly to {B}")
    return out


def _time_cpu(cfg, probe: Probe, out: dict, timed_b: int) -> None:
    """The CPU timings of :func:`_measure`, into ``out``: training step, forward, sampler."""
    fb, opt_s, saved_cpu, cpu_s = time_steps(probe, cfg, timed_b)
    # forward and sampler timings within the same FLOP budget (a 90 M-parameter model: one image, one step)
    fwd = max(out["fwd_img"], 1.0)
    fb_b = max(1, min(timed_b * 2, 64, int(CPU_TIMING_FLOPS // fwd)))
    reps = 3 if 4 * fb_b * fwd < CPU_TIMING_FLOPS else 1
    out.update(timed_b=timed_b, fb=fb, opt_s=opt_s, step_cpu_s=cpu_s, a1_cpu=saved_cpu / timed_b, fwd_s=time_forward(probe, fb_b, reps) / fb_b)
    if probe.sample is not None:  # at the batch sampling runs at (capped): per-image cost grows with the batch on a CPU
        mult = 1 if cfg.sampling.guidance in (0.0, 1.0) else 2
        n = max(1, min(cfg.sampling.batch_size, 48, int(CPU_TIMING_FLOPS // (3 * mult * fwd))))
        steps = 3 if 3 * n * mult * fwd <= CPU_TIMING_FLOPS else 1
        out["sample_s"] = time_sampling(probe, n, steps, warm=8 * mult * fwd < CPU_TIMING_FLOPS)


def _estimate(cfg, assumed_mfu: float, accelerators, time_cpu: bool, cache: dict, side: int = 1) -> Estimate:
    tr = cfg.training
    torch.manual_seed(tr.seed)
    resolved = spec_and_records(cfg.dataset, 64)
    spec, _, n_train, exists = resolved
    key = ("shape", shape_key(cfg, spec), time_cpu, side if time_cpu else 1)
    if key not in cache:
        probe, _ = make_probe(cfg, resolved=resolved)
        cache[key] = _measure(cfg, probe, time_cpu, side)
    me = cache[key]
    P = me["params"]
    B, A = tr.batch_size, tr.grad_accum
    gpu_prec, cpu_prec = _precisions(tr)
    notes: list[str] = list(me["notes"])
    per_img_flops, per_img_fwd, ops, a0, a1, a1_cpu = me["flops_img"], me["fwd_img"], me["ops"], me["a0"], me["a1"], me["a1_cpu"]
    step_flops = per_img_flops * B
    static = P * (4 + 4 + 8 + (4 if me["ema"] else 0))
    data_all = n_train * me["example_bytes"]
    data = data_all if data_all < DATA_ON_DEVICE_BYTES else 0.0
    peak_gpu = static + data + a0 + a1 * B + RESERVE_BYTES
    train_flops = step_flops * A * tr.steps

    # what runs around training: validation, sampling / evaluation forwards, scoring
    sizes = spec.split_sizes()
    ev = cfg.evaluation
    n_val_runs = (tr.steps // tr.val_every if tr.val_every else 0) + (0 if tr.val_every and tr.steps % tr.val_every == 0 else 1)
    n_val_runs = n_val_runs if sizes.get("val") else 0
    diffusion = not hasattr(cfg, "objective")
    if diffusion:
        s = cfg.sampling
        cfg_mult = 1 if s.guidance in (0.0, 1.0) else 2
        splits = _eval_splits(spec, ev.splits)
        eval_images = sampled_images(spec, splits, s.n_per_combination)
        val_loss_imgs = min(256, sizes.get("val", 0))
        val_gen = min(ev.val_samples, sizes.get("val", 0)) if ev.enabled else 0
        fwd_images = eval_images * s.steps * cfg_mult + n_val_runs * (val_loss_imgs + val_gen * ev.val_steps * cfg_mult)
        sample_steps = eval_images * s.steps + n_val_runs * val_gen * ev.val_steps  # image x sampler step
        plain_fwd = n_val_runs * val_loss_imgs
        parsed = (eval_images if ev.enabled else 0) + n_val_runs * val_gen
        checked = ev.check_n if ev.enabled else 0
        evaluator = ev.evaluator if ev.enabled else None
    else:
        splits = _eval_splits(spec, None)
        eval_images = sum(sizes.get(s_, 0) for s_ in splits)
        fwd_images = eval_images + n_val_runs * sizes.get("val", 0)
        parsed, checked, evaluator = 0, 0, None
        sample_steps, plain_fwd = 0, fwd_images
    eval_flops = fwd_images * per_img_fwd

    # this machine
    cpu_step = cpu_train = cpu_eval = cpu_gen = model_s = idle_step = 0.0
    if time_cpu:
        cpu_step = A * me["fb"] * B / me["timed_b"] + me["opt_s"]
        # process CPU time of a step, spread over the threads: what the step takes when the machine is idle
        wall_timed = me["fb"] + me["opt_s"]
        idle_step = cpu_step * min(1.0, me["step_cpu_s"] / max(me["threads"], 1) / max(wall_timed, 1e-12))
        cpu_train = cpu_step * tr.steps
        render_s = parse_s = 0.0
        if parsed or checked or not exists:
            skey = ("scoring", _scoring_key(spec, evaluator))
            if skey not in cache:
                cache[skey] = time_scoring(spec, evaluator)
            render_s, parse_s = cache[skey]
        model_s = plain_fwd * me["fwd_s"] + sample_steps * me["sample_s"]
        cpu_eval = model_s + parsed * parse_s + checked * (render_s + parse_s)
        if not exists:
            workers = min(cfg.dataset.workers, os.cpu_count() or 1)
            cpu_gen = sum(sizes.values()) * render_s / workers
    # every CPU timing above is wall time as loaded now; the process CPU time of the training step says how much
    # of it the run had the core for: scale every phase to an idle machine by the same factor (trials of a sweep
    # each get a core of their own; a dry run measured beside other work must not inflate the estimate)
    idle_factor = idle_step / cpu_step if cpu_step > 0 else 1.0
    peak_cpu = static + data_all + a1_cpu * B
    ae = None
    ae_train = ae_enc = ae_dec = ae_peak = cpu_ae = 0.0
    if diffusion and cfg.model.latent is not None:
        akey = ("autoencoder", cfg.model.latent.model_dump_json(), spec.fingerprint())
        if akey not in cache:
            cache[akey] = measure_autoencoder(cfg, spec)
        ae = cache[akey]
        ae_train = 0.0 if ae["cached"] else ae["train_flops_img"] * ae["batch"] * ae["steps"]
        # encoding: the training split once (cached per dataset) and up to 256 val images; decoding: every generated image
        ae_enc = ae["encode_flops_img"] * (n_train + min(256, sizes.get("val", 0)) + (0 if ae["cached"] else min(512, ae["pool"])))
        ae_dec = ae["decode_flops_img"] * (eval_images + n_val_runs * (val_gen if diffusion else 0))
        ae_peak = ae["params"] * (4 + 4 + 8 + 4) + ae["saved_img"] * ae["batch"] + RESERVE_BYTES
        if time_cpu and me["fb"]:
            rate = me["flops_img"] * me["timed_b"] / max(me["fb"], 1e-12)  # this machine's FLOP/s on the run's own step
            cpu_ae = (ae_train + ae_enc + ae_dec) / max(rate, 1.0)
            notes.append("autoencoder time on this machine: its FLOPs at the FLOP rate measured on the denoiser's step")
        notes.append(f"autoencoder {ae['params'] / 1e6:.2f} M parameters, " + (
            "cached (trained already)" if ae["cached"] else f"{ae['steps']} steps x {ae['batch']} images to train first"))
        peak_gpu = max(peak_gpu, ae_peak)
    ae_flops = ae_train + ae_enc + ae_dec
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")

    # accelerators
    rows, warnings = [], []
    per_step_gpu_flops = step_flops * A
    for acc in accelerators:
        peak = acc.bf16_tflops * 1e12 * (0.5 if gpu_prec == "fp32" else 1.0)
        mem = acc.memory_gb * 1e9
        fits = peak_gpu <= mem
        room = mem - (static + data + a0 + RESERVE_BYTES)
        max_b = int(room // a1) if a1 > 0 and room > 0 else (None if a1 <= 0 else 0)
        step_s = max(per_step_gpu_flops / (peak * assumed_mfu), A * ops * LAUNCH_S)
        train_s = step_s * tr.steps
        fwd_gpu = (eval_flops + ae_flops) / (peak * assumed_mfu)
        scoring_cpu = max(cpu_eval - model_s, 0.0) if time_cpu else 0.0
        rows.append(AcceleratorRow(acc.name, acc.bf16_tflops, acc.memory_gb, fits, max_b, train_s, train_s + fwd_gpu + scoring_cpu))
        if not fits:
            fix = (f"lower training.batch_size to {max_b} or less (raise training.grad_accum to keep the global batch)"
                   if max_b else "use a smaller model")
            warnings.append(f"{acc.name} ({acc.memory_gb:g} GB): batch {B} needs about {peak_gpu / GiB:.1f} GiB per process "
                            f"({gpu_prec}); it does not fit: {fix}")
    if gpu_prec != "fp32":
        notes.append("accelerator memory measured under CPU autocast as a stand-in for CUDA autocast")
    if diffusion and cfg.model.conditioning == "caption":
        notes.append("caption vocabulary built from the sampled records (the run builds it from the whole dataset)")
    return Estimate(
        name=cfg.name, family=me["family"], params=P, image_size=spec.image.size, batch_size=B, grad_accum=A, steps=tr.steps,
        train_images=n_train, precision_gpu=gpu_prec, precision_cpu=cpu_prec, train_flops_per_image=per_img_flops,
        forward_flops_per_image=per_img_fwd, train_flops_per_step=per_step_gpu_flops, train_flops_total=train_flops,
        eval_flops_total=eval_flops, eval_images=eval_images, ops_per_step=ops, activation_bytes_fixed=a0,
        activation_bytes_per_image=a1, activation_bytes_per_image_cpu=a1_cpu, static_bytes=static, data_bytes=data,
        peak_bytes_gpu=peak_gpu, peak_bytes_cpu=peak_cpu, cpu_threads=me["threads"], cpu_timed_batch=me["timed_b"],
        cpu_step_s=cpu_step, cpu_step_idle_s=idle_step, cpu_train_s=cpu_train * idle_factor, cpu_eval_s=cpu_eval * idle_factor,
        cpu_generate_s=cpu_gen * idle_factor, cpu_total_s=(cpu_train + cpu_eval + cpu_gen + cpu_ae) * idle_factor, cpu_load=load,
        cpu_total_loaded_s=cpu_train + cpu_eval + cpu_gen + cpu_ae, assumed_mfu=assumed_mfu, accelerators=rows,
        warnings=warnings, notes=notes, autoencoder_params=ae["params"] if ae else 0, autoencoder_cached=bool(ae and ae["cached"]),
        autoencoder_train_flops=ae_train, autoencoder_encode_flops=ae_enc, autoencoder_decode_flops=ae_dec,
        autoencoder_peak_bytes=ae_peak, cpu_autoencoder_s=cpu_ae * idle_factor,
    )


__all__ = ["ACCELERATORS", "ASSUMED_MFU", "Accelerator", "AcceleratorRow", "Estimate", "estimate_run", "sampled_images", "shape_key"]
