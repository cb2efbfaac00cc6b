"""What a run costs, before it runs: parameters, FLOPs, memory and wall time (``--dry-run``).

:func:`estimate_run` takes a validated diffusion or transformer config and returns an
:class:`Estimate`; :func:`render_estimate` turns it into rich tables. Nothing is written to disk:
the dataset is not generated (the spec, with its overrides, is validated and a few of its records
are sampled in memory), no run folder is made.

How each number is obtained (see README, "Cost estimate"):

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

import contextlib
import math
import os
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from mosaic.errors import ConfigError, MosaicError
from mosaic.lab.loop import check_device  # noqa: F401  (re-exported: estimate_run checks the device as the run would)

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
#: Images in the fake-tensor step that measures FLOPs and activations (a prime: weights' shapes are rarely its multiples).
PROBE_BATCH = 13
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
# measuring a model: FLOPs, saved activations, op count
# ----------------------------------------------------------------------------------------------


def _sdpa_mapping() -> dict:
    """FLOP formulas for the CPU attention kernels the stock counter does not know."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    out = {}

    def fwd(q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(q, k, v)

    def bwd(grad_out, q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out, q, k, v)

    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        out[aten._scaled_dot_product_flash_attention_for_cpu] = fwd
        out[aten._scaled_dot_product_flash_attention_for_cpu_backward] = bwd
    return out


class _OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts aten ops dispatched that compute (each is about one kernel launch on a GPU)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    _FREE = {"detach", "alias", "lift_fresh", "_to_copy_meta", "empty", "empty_like", "zeros", "ones", "scalar_tensor",
             "_local_scalar_dense", "clone_meta", "resolve_conj", "resolve_neg"}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        if not func.is_view and func.__name__.split(".")[0] not in self._FREE:  # views and allocations launch no kernel
            self.n += 1
        return func(*args, **(kwargs or {}))


@dataclass
class StepMeasure:
    """One measured forward + backward: FLOPs, saved-activation bytes, aten op count."""

    forward_flops: float
    backward_flops: float
    saved_bytes: float
    saved_bytes_batched: float  # of the saved tensors whose leading dimension is a multiple of the batch
    ops: int

    @property
    def flops(self) -> float:
        return self.forward_flops + self.backward_flops


def measure_step(model: torch.nn.Module, loss_fn: Callable, batch: dict, *, dtype: torch.dtype | None = None,
                 fake: bool = True, seed: int = 0) -> StepMeasure:
    """FLOPs and saved-activation bytes of one training step ``loss_fn(model, batch, generator).backward()``.

    Args:
        model: the module (CPU); its gradients are cleared afterwards.
        loss_fn: ``(model, batch, torch.Generator) -> scalar loss``.
        batch: tensors with a leading batch dimension (CPU).
        dtype: ``torch.bfloat16`` / ``torch.float16`` to run under CPU autocast, None for fp32.
        fake: run on fake tensors (shapes only; no compute, no memory).
    Returns:
        :class:`StepMeasure`: forward and backward FLOPs (``FlopCounterMode``), bytes of the
        distinct storages autograd saved for backward (parameters excluded) and of those among
        them whose leading dimension is a multiple of the batch (activations; the rest, e.g.
        autocast copies of weights, is per step), aten ops that compute.
    """
    from torch.utils.flop_counter import FlopCounterMode

    param_keys = {p.untyped_storage()._cdata for p in model.parameters()}
    b = len(next(iter(batch.values())))
    saved: dict[int, tuple[int, bool]] = {}

    def pack(t):
        try:
            st = t.untyped_storage()
            key = st._cdata
            if key not in param_keys:
                batched = b > 1 and t.dim() > 0 and t.shape[0] % b == 0
                saved[key] = (st.nbytes(), batched or saved.get(key, (0, False))[1])
        except (RuntimeError, NotImplementedError):  # tensors without storage (nested, sparse)
            pass
        return t

    fwd = FlopCounterMode(display=False, custom_mapping=_sdpa_mapping())
    bwd = FlopCounterMode(display=False, custom_mapping=_sdpa_mapping())
    ops = _OpCounter()
    model.train()
    ctx_fake = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        ctx_fake = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        if ctx_fake is not None:
            ctx_fake.__enter__()
            batch = {k: ctx_fake.from_tensor(v) for k, v in batch.items()}
        gen = torch.Generator().manual_seed(seed)
        with ops:
            with fwd, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                    loss = loss_fn(model, batch, gen)
            with bwd:
                loss.backward()
    finally:
        if ctx_fake is not None:
            ctx_fake.__exit__(None, None, None)
        model.zero_grad(set_to_none=True)
    return StepMeasure(float(fwd.get_total_flops()), float(bwd.get_total_flops()), float(sum(n for n, _ in saved.values())),
                       float(sum(n for n, bt in saved.values() if bt)), ops.n)


# ----------------------------------------------------------------------------------------------
# probes: the run's model, loss and a batch maker, without a dataset on disk
# ----------------------------------------------------------------------------------------------


@dataclass
class Probe:
    """What estimating needs of a config: its model, its task's loss and batches like the run's."""

    family: str
    spec: Any
    model: torch.nn.Module
    loss: Callable                      # (model, batch, generator) -> loss (the task's own loss)
    make_batch: Callable[[int], dict]   # batch of b examples, like the loop's batches
    forward: Callable                   # (model, batch) -> output, no grad (sampling / evaluation)
    train_images: int
    example_bytes: float                # bytes of one training example's tensors (image or tokens, condition or labels)
    fake_ok: bool = True                # the loss runs on fake tensors
    ema: bool = True
    sample: Callable | None = None      # (model, n, steps) -> images: the real sampler (diffusion)


def _spec_and_records(section, k: int):
    """``(spec, records of the train split (up to k), train size, dataset exists)`` without writing."""
    from mosaic.lab.data import dataset_dir_for, load_dataset_spec

    if section.path is not None:
        from mosaic.dataset import read_metadata, spec_of
        from mosaic.lab.data import resolve_dataset

        root = resolve_dataset(section, generate=False)  # raises DatasetError for a missing/incomplete dataset
        spec = spec_of(root)
        split = "train" if spec.split_sizes().get("train") else next(iter(spec.split_sizes()))
        return spec, read_metadata(root, split)[:k], spec.split_sizes().get("train", 0), True
    spec = load_dataset_spec(section)
    from mosaic.dataset import read_manifest, sample_record

    sizes = spec.split_sizes()
    split = "train" if sizes.get("train") else next((s for s, n in sizes.items() if n), "train")
    recs = [sample_record(spec, split, i)[0] for i in range(min(k, max(sizes.get(split, 0), 1)))]
    root = Path(section.root) / dataset_dir_for(spec)
    exists = False
    if (root / "manifest.json").is_file():
        try:
            exists = read_manifest(root).get("status") == "complete"
        except (MosaicError, ValueError, OSError):
            exists = False
    return spec, recs, sizes.get("train", 0), exists


def _cycle(records: list[dict], b: int) -> list[dict]:
    return [records[i % len(records)] for i in range(b)]


def diffusion_probe(cfg, spec, records: list[dict], n_train: int) -> Probe:
    """The model, loss (``DiffusionTask.loss``) and batches of a diffusion config; for latent
    diffusion the backbone on latents and an untrained autoencoder of the configured shape as the
    space the sampler decodes through (its cost does not depend on its weights)."""
    from mosaic.lab.diffusion import DiffusionModel, DiffusionTask, build_backbone, check_model_fits
    from mosaic.lab.diffusion.conditioning import (
        CaptionConditioner, CombinationConditioner, FactorizedConditioner, OneHotConditioner, build_vocab,
    )
    from mosaic.lab.diffusion.task import make_noise_scheduler

    m = cfg.model
    size = spec.image.size
    space = None
    if m.latent is not None:
        from mosaic.lab.autoencoder import LatentSpace, build_autoencoder

        space = LatentSpace(build_autoencoder(m.latent.autoencoder, size))
    msize, mch = (space.size(size), space.channels) if space is not None else (size, 3)
    check_model_fits(m, msize)
    domains = {c: spec.domain(c) for c in spec.concepts}
    if m.conditioning == "factorized":
        cond = FactorizedConditioner(domains, m.cond_dim)
    elif m.conditioning == "combination":
        cond = CombinationConditioner(domains, m.cond_dim)
    elif m.conditioning == "onehot":
        o = m.onehot_
        cond = OneHotConditioner(domains, m.cond_dim, hidden=o.hidden, tokens=o.tokens, dropout=o.dropout)
    else:  # the run builds the vocabulary from every caption of the dataset; here from the sampled records
        t = m.text
        cond = CaptionConditioner(build_vocab(r["caption"] for r in records), m.cond_dim, layers=t.layers, heads=t.heads,
                                  max_len=t.max_len, dropout=t.dropout)
    model = DiffusionModel(build_backbone(m, msize, mch), cond, m.backbone, pooled=m.mmdit_.pooled)
    s = m.schedule
    noise = make_noise_scheduler(s, latent=space is not None)
    task = types.SimpleNamespace(cfg=cfg, noise=noise)  # DiffusionTask.loss reads only cfg and noise

    def loss(model_, batch, gen):
        return DiffusionTask.loss(task, model_, batch, gen)

    def make_batch(b: int) -> dict:
        g = torch.Generator().manual_seed(b)
        if space is not None:
            return {"latent": torch.randn((b, mch, msize, msize), generator=g), "cond": cond.encode(_cycle(records, b))}
        return {"image": torch.randint(0, 256, (b, 3, size, size), dtype=torch.uint8, generator=g),
                "cond": cond.encode(_cycle(records, b))}

    def forward(model_, batch):
        x = batch["latent"] if "latent" in batch else batch["image"].float() / 127.5 - 1
        t = torch.full((len(x),), s.num_train_timesteps // 2, dtype=torch.long)
        return model_(x, t, batch["cond"])

    def sample(model_, n: int, steps: int):
        from mosaic.lab.diffusion import generate

        sp = cfg.sampling
        return generate(model_, noise.config, cond.encode(_cycle(records, n)), list(range(n)), image_size=size, guidance=sp.guidance,
                        steps=steps, sampler=sp.sampler, batch_size=sp.batch_size, device="cpu", space=space)

    cond_row = cond.encode(records[:1])
    per_example = (4 * mch * msize * msize if space is not None else 3 * size * size) + cond_row[0].numel() * 8
    family = f"diffusion ({m.backbone}, {m.conditioning}" + (", flow matching" if s.flow_matching else "") \
        + (f", latent {mch}x{msize}x{msize}" if space is not None else "") + ")"
    return Probe(family, spec, model, loss, make_batch, forward, n_train, per_example, ema=cfg.training.ema.enabled, sample=sample)


def transformer_probe(cfg, spec, records: list[dict], n_train: int) -> Probe:
    """The model, loss (``ClassifierTask.loss`` / ``BindingTask.loss``) and batches of a transformer config."""
    from mosaic.lab.transformer import BindingTask, ClassifierModel, ClassifierTask, DualEncoder, make_encoder
    from mosaic.lab.transformer.tokens import SceneTokenizer, fact_table, object_table, tokens_from_table

    kind = cfg.input.kind
    size = spec.image.size
    need_tokens = cfg.objective == "binding" or kind == "tokens"
    tok = SceneTokenizer.from_spec(spec) if need_tokens else None

    def inputs(recs: list[dict], g: torch.Generator) -> torch.Tensor:
        if kind == "image":
            return torch.randint(0, 256, (len(recs), 3, size, size), dtype=torch.uint8, generator=g)
        return tokens_from_table(tok, object_table(tok, recs), fact_table(tok, recs))

    per_example = 3 * size * size if kind == "image" else inputs(records[:1], torch.Generator()).numel() * 8
    if cfg.objective == "classifier":
        heads = cfg.classifier.concepts or list(spec.concepts)
        unknown = [c for c in heads if c not in spec.concepts]
        if unknown:
            raise ConfigError([("classifier.concepts", f"{unknown} are not concepts of the dataset's spec ({list(spec.concepts)})")])
        model = ClassifierModel(make_encoder(cfg, kind, tok, size), [len(spec.domain(c)) for c in heads])
        lookup = {c: {v: k for k, v in enumerate(spec.domain(c))} for c in heads}

        def make_batch(b: int) -> dict:
            recs = _cycle(records, b)
            y = torch.tensor([[lookup[c].get(r["concepts"].get(c), -1) for c in heads] for r in recs], dtype=torch.long)
            return {"x": inputs(recs, torch.Generator().manual_seed(b)), "y": y.reshape(b, len(heads))}

        def loss(model_, batch, gen):
            return ClassifierTask.loss(None, model_, batch, gen)

        def forward(model_, batch):
            return model_(batch["x"])

        return Probe(f"transformer (classifier, {kind})", spec, model, loss, make_batch, forward, n_train,
                     per_example + 8 * len(heads), ema=cfg.training.ema.enabled)

    from mosaic.lab.transformer.binding import swap_negatives

    scene = make_encoder(cfg, kind, tok, size)
    query = make_encoder(cfg, "tokens", tok, None, max_len=tok.query_len)
    model = DualEncoder(scene, query, cfg.model.embed_dim, cfg.binding.tau_init)
    cq, _ = tok.concept_queries()
    task = types.SimpleNamespace(cfg=cfg, tokenizer=tok, concept_query_tokens=cq,
                                 allowed_neg=torch.ones(tok.n_object_types, dtype=torch.bool),
                                 all_types=torch.from_numpy(tok.all_object_types()))
    task.queries_for = types.MethodType(BindingTask.queries_for, task)

    def make_batch(b: int) -> dict:
        recs = _cycle(records, b)
        objs = object_table(tok, recs)
        swaps = [swap_negatives(o) for o in objs.tolist()]
        table = torch.full((b, max(1, max(len(s) for s in swaps)), len(tok.attributes)), -1, dtype=torch.long)
        for n, sw in enumerate(swaps):
            if sw:
                table[n, :len(sw)] = torch.tensor(sw, dtype=torch.long)
        return {"x": inputs(recs, torch.Generator().manual_seed(b)), "objects": objs, "swaps": table}

    def loss(model_, batch, gen):
        return BindingTask.loss(task, model_, batch, gen)

    def forward(model_, batch):
        return model_.embed_scenes(batch["x"])

    return Probe(f"transformer (binding, {kind})", spec, model, loss, make_batch, forward, n_train, per_example * 2,
                 fake_ok=False, ema=cfg.training.ema.enabled)


def make_probe(cfg, k: int = 64, resolved=None) -> tuple[Probe, bool]:
    """The :class:`Probe` of a diffusion or transformer config and whether its dataset already exists.

    Raises:
        ConfigError, SpecError, DatasetError: the config, its spec or its dataset path is invalid.
    """
    spec, records, n_train, exists = resolved or _spec_and_records(cfg.dataset, k)
    if not records:
        raise ConfigError([("dataset", "the spec has no samples in any split: nothing to train on")])
    if hasattr(cfg, "objective"):
        return transformer_probe(cfg, spec, records, n_train), exists
    return diffusion_probe(cfg, spec, records, n_train), exists


def measure_autoencoder(cfg, spec) -> dict:
    """The autoencoder of ``model.latent`` measured on fake tensors: ``params``, training FLOPs and
    saved-activation bytes per image (its own loss: encode, sample, decode, L1 + MSE + edge + KL),
    encoder and decoder forward FLOPs per image; ``cached`` when the run would find it trained."""
    from torch.utils.flop_counter import FlopCounterMode

    from mosaic.lab.autoencoder import build_autoencoder, cache_dir, reconstruction_loss

    lat = cfg.model.latent
    sec = lat.autoencoder
    size = spec.image.size
    vae = build_autoencoder(sec, size)

    def loss(model_, batch, gen):
        x = batch["image"].float() / 127.5 - 1
        post = model_.encode(x).latent_dist
        rec = model_.decode(post.sample(generator=gen)).sample
        return reconstruction_loss(sec, rec, x, post.kl())

    b = PROBE_BATCH
    step = measure_step(vae, loss, {"image": torch.zeros((b, 3, size, size), dtype=torch.uint8)}, fake=True)
    from torch._subclasses.fake_tensor import FakeTensorMode

    enc, dec = FlopCounterMode(display=False, custom_mapping=_sdpa_mapping()), FlopCounterMode(display=False, custom_mapping=_sdpa_mapping())
    with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
        x = mode.from_tensor(torch.zeros((b, 3, size, size)))
        with enc:
            z = vae.encode(x).latent_dist.mean
        with dec:
            vae.decode(z)
    folder = Path(lat.path) if lat.path is not None else cache_dir(lat.root, spec, sec)
    return {"params": sum(p.numel() for p in vae.parameters()), "train_flops_img": step.flops / b, "saved_img": step.saved_bytes_batched / b,
            "encode_flops_img": float(enc.get_total_flops()) / b, "decode_flops_img": float(dec.get_total_flops()) / b,
            "cached": (folder / "vae" / "config.json").is_file() and (lat.path is not None or (folder / "autoencoder.json").is_file()),
            "steps": sec.steps, "batch": sec.batch_size, "pool": min(sec.pool, spec.split_sizes().get("train", 0))}


# ----------------------------------------------------------------------------------------------
# timing on this machine
# ----------------------------------------------------------------------------------------------


def _time_steps(probe: Probe, cfg, b: int, min_s: float = 3.0, max_steps: int = 30) -> tuple[float, float, float, float]:
    """``(seconds of forward + backward per micro-batch of b, seconds of clip + AdamW + EMA per step,
    bytes autograd saved in the warm-up step, process CPU seconds of a whole step)``: medians of real
    steps after one warm-up step (at least 2 timed steps, up to ``min_s`` seconds). The weights are
    restored afterwards."""
    tr = cfg.training
    model = probe.model
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=tr.lr, betas=tr.betas, weight_decay=tr.weight_decay)
    ema = None
    if tr.ema.enabled:
        from diffusers.training_utils import EMAModel

        ema = EMAModel(params, decay=tr.ema.decay, use_ema_warmup=tr.ema.warmup, power=tr.ema.power)
    dtype = torch.bfloat16 if tr.mixed_precision == "bf16" else None
    fb, op, cpu = [], [], []
    param_keys = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st._cdata not in param_keys:
            saved[st._cdata] = st.nbytes()
        return t

    t_start = time.perf_counter()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        for i in range(max_steps + 1):
            batch = probe.make_batch(b)
            gen = torch.Generator().manual_seed(i)
            t0, c0 = time.perf_counter(), time.process_time()
            hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if i == 0 else contextlib.nullcontext()
            with hooks, torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = probe.loss(model, batch, gen)
            loss.backward()
            loss.detach().item()
            t1 = time.perf_counter()
            if tr.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, tr.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if ema is not None:
                ema.step(params)
            t2, c2 = time.perf_counter(), time.process_time()
            if i:  # the first step warms up (allocations, lazy inits)
                fb.append(t1 - t0)
                op.append(t2 - t1)
                cpu.append(c2 - c0)
            if i >= 2 and time.perf_counter() - t_start > min_s:
                break
    finally:
        model.load_state_dict(state)
    fb.sort()
    op.sort()
    cpu.sort()
    return fb[len(fb) // 2], op[len(op) // 2], float(sum(saved.values())), cpu[len(cpu) // 2]


def _time_sampling(probe: Probe, n: int, steps: int = 3, warm: bool = True) -> float:
    """Seconds per image per sampler step of the real sampler (``generate``: guidance, scheduler) on
    ``n`` images, after a one-step warm-up (``warm``)."""
    model = probe.model.eval()
    try:
        if warm:
            probe.sample(model, 2, 1)
        t0 = time.perf_counter()
        probe.sample(model, n, steps)
        return (time.perf_counter() - t0) / (n * steps)
    finally:
        model.train()


@torch.no_grad()
def _time_forward(probe: Probe, b: int, reps: int = 3) -> float:
    """Seconds of one no-grad forward pass over a batch of b (median of ``reps`` after a warm-up)."""
    model = probe.model.eval()
    batch = probe.make_batch(b)
    ts = []
    try:
        for i in range(reps + 1):
            t0 = time.perf_counter()
            probe.forward(model, batch)
            if i:
                ts.append(time.perf_counter() - t0)
    finally:
        model.train()
    ts.sort()
    return ts[len(ts) // 2]


def _time_scoring(spec, evaluator: str | None, n: int = 6) -> tuple[float, float]:
    """``(seconds to render + PNG-encode one image, seconds for the evaluator to read one image)``."""
    from mosaic.evaluation import ground_truth

    t0 = time.perf_counter()
    images, _ = ground_truth(spec, 0, n)
    from mosaic.dataset import png_bytes

    for im in images:
        png_bytes(im)
    render = (time.perf_counter() - t0) / n
    if evaluator is None:
        return render, 0.0
    from mosaic.lab.diffusion import load_evaluator

    ev = load_evaluator(spec, evaluator, device="cpu")
    ev.predict(images[:1])
    t0 = time.perf_counter()
    ev.predict(images)
    return render, (time.perf_counter() - t0) / n


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
        from mosaic.holdout import HELD_OUT, SEEN

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
                 time_cpu: bool = True, check_device_present: bool = True, cache: dict | None = None) -> Estimate:
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
    Returns:
        :class:`Estimate` (FLOPs, bytes, seconds), with ``warnings`` for accelerators whose memory
        the batch does not fit.
    Raises:
        ConfigError: a device that is absent, a model that does not fit the image size, unknown concepts.
        SpecError, DatasetError, TokenizationError: the dataset section does not resolve.
    """
    from mosaic.lab.loop import torch_threads_restored

    if check_device_present:
        check_device(cfg.training)
    with torch_threads_restored():
        if cfg.training.threads:
            torch.set_num_threads(cfg.training.threads)
        return _estimate(cfg, assumed_mfu, accelerators, time_cpu, {} if cache is None else cache)


def shape_key(cfg, spec) -> str:
    """What the expensive measurements depend on: the model sections, the image size and concept
    domains, the batch, precision, threads, EMA and the objective's options (not steps, not
    dataset sizes, not sampling)."""
    import json

    d = cfg.model_dump(mode="json")
    keep = {k: d.get(k) for k in ("model", "objective", "input", "classifier", "binding")}
    tr = d["training"]
    keep["training"] = {k: tr.get(k) for k in ("batch_size", "mixed_precision", "threads", "grad_clip")}
    keep["ema"] = tr["ema"]["enabled"]
    keep["image_size"] = spec.image.size
    keep["domains"] = {c: [str(v) for v in spec.domain(c)] for c in spec.concepts}
    return json.dumps(keep, sort_keys=True)


def _scoring_key(spec, evaluator) -> str:
    import json

    d = spec.to_dict()
    d.pop("splits", None)
    d.pop("holdout", None)
    return json.dumps([d, evaluator], sort_keys=True, default=str)


def _measure(cfg, probe: Probe, time_cpu: bool) -> dict:
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
        fb, opt_s, saved_cpu, cpu_s = _time_steps(probe, cfg, timed_b)
        # forward and sampler timings within the same FLOP budget (a 90 M-parameter model: one image, one step)
        fwd = max(out["fwd_img"], 1.0)
        fb_b = max(1, min(timed_b * 2, 64, int(CPU_TIMING_FLOPS // fwd)))
        reps = 3 if 4 * fb_b * fwd < CPU_TIMING_FLOPS else 1
        out.update(timed_b=timed_b, fb=fb, opt_s=opt_s, step_cpu_s=cpu_s, a1_cpu=saved_cpu / timed_b, fwd_s=_time_forward(probe, fb_b, reps) / fb_b)
        if probe.sample is not None:  # at the batch sampling runs at (capped): per-image cost grows with the batch on a CPU
            mult = 1 if cfg.sampling.guidance in (0.0, 1.0) else 2
            n = max(1, min(cfg.sampling.batch_size, 48, int(CPU_TIMING_FLOPS // (3 * mult * fwd))))
            steps = 3 if 3 * n * mult * fwd <= CPU_TIMING_FLOPS else 1
            out["sample_s"] = _time_sampling(probe, n, steps, warm=8 * mult * fwd < CPU_TIMING_FLOPS)
        if timed_b < B:
            notes.append(f"CPU time measured at batch {timed_b} and scaled linearly to {B}")
    return out


def _estimate(cfg, assumed_mfu: float, accelerators, time_cpu: bool, cache: dict) -> Estimate:
    tr = cfg.training
    torch.manual_seed(tr.seed)
    resolved = _spec_and_records(cfg.dataset, 64)
    spec, _, n_train, exists = resolved
    key = ("shape", shape_key(cfg, spec), time_cpu)
    if key not in cache:
        probe, _ = make_probe(cfg, resolved=resolved)
        cache[key] = _measure(cfg, probe, time_cpu)
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
                cache[skey] = _time_scoring(spec, evaluator)
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


# ----------------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------------


def fmt_flops(x: float) -> str:
    """``1.23 TFLOP``-style text of a FLOP count."""
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def fmt_bytes(x: float) -> str:
    return f"{x / GiB:.2f} GiB" if x >= GiB / 10 else f"{x / 2**20:.1f} MiB"


def fmt_seconds(s: float) -> str:
    if s >= 86400 * 2:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 90:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s" if s >= 1 else f"{1000 * s:.0f} ms"


def render_estimate(est: Estimate) -> list:
    """Rich renderables of an estimate: the run's cost table, the accelerator table, warnings and notes."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"cost estimate: {est.name} — {est.family}", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("parameters", f"{est.params / 1e6:.2f} M")
    t.add_row("batch per process x grad_accum, steps", f"{est.batch_size} x {est.grad_accum}, {est.steps}")
    t.add_row("training FLOPs per image (forward + backward)", fmt_flops(est.train_flops_per_image))
    t.add_row("training FLOPs per step", fmt_flops(est.train_flops_per_step))
    t.add_row("training FLOPs, whole run", fmt_flops(est.train_flops_total))
    t.add_row(f"validation + sampling/evaluation FLOPs ({est.eval_images} test images)", fmt_flops(est.eval_flops_total))
    if est.autoencoder_params:
        t.add_row("autoencoder: training" + (" (cached: 0)" if est.autoencoder_cached else ""), fmt_flops(est.autoencoder_train_flops))
        t.add_row("autoencoder: encoding the dataset, decoding the samples",
                  fmt_flops(est.autoencoder_encode_flops + est.autoencoder_decode_flops))
    t.add_row("total FLOPs", fmt_flops(est.flops_total))
    t.add_row(f"peak memory per process, accelerator ({est.precision_gpu})", fmt_bytes(est.peak_bytes_gpu))
    t.add_row("  of which activations at the batch", fmt_bytes(est.activation_bytes_fixed + est.activation_bytes_per_image * est.batch_size))
    t.add_row("  weights, gradients, AdamW, EMA", fmt_bytes(est.static_bytes))
    t.add_row("  training data on the device", fmt_bytes(est.data_bytes))
    t.add_row(f"peak memory, this machine's CPU ({est.precision_cpu})", fmt_bytes(est.peak_bytes_cpu))
    if est.cpu_step_s:
        t.add_row(f"this machine: one step ({est.cpu_threads} thread(s), load {est.cpu_load:.1f} now)", fmt_seconds(est.cpu_step_s))
        t.add_row("  the same step on this machine idle (process CPU time)", fmt_seconds(est.cpu_step_idle_s))
        t.add_row("this machine: training (a core per thread)", fmt_seconds(est.cpu_train_s))
        t.add_row("this machine: validation, sampling, scoring", fmt_seconds(est.cpu_eval_s))
        if est.cpu_generate_s:
            t.add_row("this machine: dataset generation", fmt_seconds(est.cpu_generate_s))
        if est.cpu_autoencoder_s:
            t.add_row("this machine: autoencoder (training, encoding, decoding)", fmt_seconds(est.cpu_autoencoder_s))
        t.add_row("[bold]this machine: total (a core per thread)[/]", f"[bold]{fmt_seconds(est.cpu_total_s)}[/]")
        if est.cpu_total_loaded_s > 1.1 * est.cpu_total_s:
            t.add_row(f"  the same at the load measured now ({est.cpu_load:.1f})", fmt_seconds(est.cpu_total_loaded_s))
    a = Table(title=f"projected on one accelerator (assumed MFU {100 * est.assumed_mfu:.0f} % of the peak dense "
                    f"{'bf16' if est.precision_gpu != 'fp32' else 'TF32'} rate)")
    for col in ("accelerator", "peak bf16 TFLOP/s", "memory", "batch fits", "training", "total"):
        a.add_column(col, justify="left" if col == "accelerator" else "right")
    for r in est.accelerators:
        fit = "yes" if r.fits else f"[red]no[/] (max {r.max_batch})"
        a.add_row(r.name, f"{r.peak_tflops:g}", f"{r.memory_gb:g} GB", fit, fmt_seconds(r.train_s), fmt_seconds(r.total_s))
    out: list = [t, a]
    for w in est.warnings:
        out.append(Text.from_markup(f"[yellow]warning[/] {w}"))
    for n in est.notes:
        out.append(Text(f"note: {n}", style="dim"))
    return out


def print_estimate(est: Estimate, console=None) -> None:
    """Print :func:`render_estimate` to ``console`` (default: a new rich Console)."""
    if console is None:
        from rich.console import Console

        console = Console(emoji=False)
    for r in render_estimate(est):
        console.print(r)


__all__ = ["ACCELERATORS", "ASSUMED_MFU", "Accelerator", "AcceleratorRow", "Estimate", "check_device", "estimate_run",
           "measure_autoencoder", "measure_step", "print_estimate", "render_estimate", "sampled_images", "shape_key"]
