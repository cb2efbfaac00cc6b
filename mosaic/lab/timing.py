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
from mosaic.lab.probe import Probe, make_probe


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


def _companion_main() -> None:
    """``python -m mosaic.lab.timing``: a companion of :func:`side_by_side`. Reads one JSON line on
    stdin (``{"cls": "module:Class", "config": {...}, "b": int, "threads": int}``), trains that
    config's probe model at batch ``b`` and prints ``ready`` after its first steps, until stdin closes."""
    import importlib
    import json
    import sys
    import threading

    job = json.loads(sys.stdin.readline())
    mod, name = job["cls"].split(":")
    cfg = getattr(importlib.import_module(mod), name).model_validate(job["config"])
    torch.set_num_threads(max(1, int(job["threads"])))
    probe, _ = make_probe(cfg)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    first = True
    while not closed.is_set():
        time_steps(probe, cfg, int(job["b"]), min_s=0.5, max_steps=4)
        if first:
            print("ready", flush=True)
            first = False


@contextlib.contextmanager
def side_by_side(cfg, n: int, b: int, start_timeout_s: float = 180.0):
    """While the block runs, ``n - 1`` other processes train the same config (its probe's steps at
    batch ``b``), as a sweep runs ``n`` trials at once: on a CPU whose cores share caches, memory
    bandwidth or a host's physical core, a step beside others takes longer than a step alone, and a
    time measured alone underestimates the sweep. Yields the number of companions ready (0 when
    ``n <= 1``, or when none was ready within ``start_timeout_s``: then the block times a step
    alone). The companions are fresh interpreters (``python -m mosaic.lab.timing``: no fork of a
    process with torch threads, no re-import of the caller's main module); they stop when the block
    ends, whatever happens (killed after 30 s)."""
    if n <= 1:
        yield 0
        return
    import json
    import selectors
    import subprocess
    import sys

    job = json.dumps({"cls": f"{type(cfg).__module__}:{type(cfg).__qualname__}", "config": cfg.model_dump(mode="json"),
                      "b": int(b), "threads": int(cfg.training.threads or 1)}) + "\n"
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n - 1):
            p = subprocess.Popen([sys.executable, "-m", "mosaic.lab.timing"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
            procs.append(p)
            p.stdin.write(job)
            p.stdin.flush()
        ready = 0
        with selectors.DefaultSelector() as sel:
            for p in procs:
                sel.register(p.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + start_timeout_s
            while ready < len(procs) and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    line = key.fileobj.readline()
                    if not line or line.strip() == "ready":  # ended, or ready (anything else it printed is skipped)
                        sel.unregister(key.fileobj)
                        ready += bool(line)
                if not sel.get_map():
                    break
        yield ready
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                p.stdin.close()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


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


if __name__ == "__main__":
    _companion_main()
