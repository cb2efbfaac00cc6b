"""Timing a run's parts on this machine: a few real training steps, the sampler, a forward pass, and
rendering and reading images (what :mod:`mosaic.lab.cost` projects this machine's wall time from).
"""

from __future__ import annotations

import contextlib
import time

import torch

from mosaic.dataset import png_bytes
from mosaic.evaluation import ground_truth
from mosaic.lab.diffusion import load_evaluator
from mosaic.lab.probe import Probe


def time_steps(probe: Probe, cfg, b: int, min_s: float = 3.0, max_steps: int = 30) -> tuple[float, float, float, float]:
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


def time_sampling(probe: Probe, n: int, steps: int = 3, warm: bool = True) -> float:
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
def time_forward(probe: Probe, b: int, reps: int = 3) -> float:
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


def time_scoring(spec, evaluator: str | None, n: int = 6) -> tuple[float, float]:
    """``(seconds to render + PNG-encode one image, seconds for the evaluator to read one image)``."""
    t0 = time.perf_counter()
    images, _ = ground_truth(spec, 0, n)
    for im in images:
        png_bytes(im)
    render = (time.perf_counter() - t0) / n
    if evaluator is None:
        return render, 0.0
    ev = load_evaluator(spec, evaluator, device="cpu")
    ev.predict(images[:1])
    t0 = time.perf_counter()
    ev.predict(images)
    return render, (time.perf_counter() - t0) / n
