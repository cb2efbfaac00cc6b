"""The learned evaluator: a small CNN, trained from scratch on renders of every combination, with
one classification head per concept.

It reads images a parser cannot read reliably (blurred, noisy, colour-shifted diffusion samples):
training images are renders of the ``evaluator_train`` split (every concept uniform over its whole
domain, held-out combinations included: the evaluator is the instrument, not the subject),
augmented with random blur, pixel noise and colour shifts (:mod:`mosaic.evaluation.degrade`
settings, drawn per image). Images are resized to ``input_size`` (default 32 px) inside the model,
so any image side works.

Architecture: input ``[B, 3, S, S]`` plus two coordinate channels (CoordConv, Liu et al. 2018: the
position of a blob must survive the convolutions for angle and relation concepts), six 3x3
conv-BN-ReLU layers in three stages of widths ``w, 2w, 4w`` (stride 2 between stages), flatten
(the spatial layout is kept: counts and angles need it), one hidden layer, and one linear head per
concept over its domain. Loss: the sum of the heads' cross-entropies.

A trained evaluator is a directory::

    DIR/config.json        format, LearnedConfig, the resolved spec, its fingerprint, concept domains
    DIR/model.safetensors  weights (safetensors: loading never runs code nor downloads anything)
    DIR/report.json        training time and loss, accuracy on fresh renders, clean and degraded
    DIR/train_log.jsonl    loss and batch accuracy every ``log_every`` steps
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field

from mosaic.errors import MosaicError
from mosaic.io import atomic_text_writer, atomic_write, make_output_dir, read_json
from mosaic.foreign_names import refuse_foreign_outputs
from mosaic.locks import FolderLock
from mosaic.schema import StrictModel
from mosaic.spec import Spec
from mosaic.evaluation.check import check_evaluator
from mosaic.labels import labels
from mosaic.sampling import sample_scene
from renderers import backend_of, get_renderer

FORMAT = "mosaic-evaluator/1"
CONFIG_FILE, WEIGHTS_FILE, REPORT_FILE, LOG_FILE = "config.json", "model.safetensors", "report.json", "train_log.jsonl"


class LearnedConfig(StrictModel):
    """Training configuration of the learned evaluator (all fields have working defaults).

    Attributes:
        input_size: side (px) the model sees; images are resized to it (bilinear, antialiased).
        width: channels of the first stage (then 2x, 4x).
        hidden: width of the hidden layer before the heads.
        steps: optimizer steps. batch_size: images per step.
        lr: peak learning rate (AdamW, one-cycle schedule). weight_decay: AdamW decay.
        n_train: distinct ``evaluator_train`` renders in the training pool (augmented every step).
        augment_p: probability that each of blur, noise and colour shift is applied to an image.
        blur_max: max Gaussian blur sigma, px of a 64 px image.
        noise_max: max pixel-noise std, sRGB levels.
        color_shift_max: max per-channel gain change (fraction); offsets up to ``100 x`` this in levels.
        seed: torch seed (initialisation, batches, augmentation).
        check_n: fresh ``evaluator_check`` renders for the accuracy report after training.
        log_every: steps between log lines.
        threads: torch CPU threads. None = automatic: torch's default, or 1 when the load average
            already fills the cores (on a shared 2-core machine two threads competing with other
            processes ran a step 7x slower than one thread, measured).
    """

    input_size: int = Field(32, ge=8, le=256)
    width: int = Field(16, ge=4, le=256)
    hidden: int = Field(256, ge=8, le=4096)
    steps: int = Field(1500, ge=1)
    batch_size: int = Field(128, ge=1)
    lr: float = Field(3e-3, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    n_train: int = Field(20000, ge=1)
    augment_p: float = Field(0.8, ge=0, le=1)
    blur_max: float = Field(1.3, ge=0)
    noise_max: float = Field(14.0, ge=0)
    color_shift_max: float = Field(0.06, ge=0, le=0.3)
    seed: int = 0
    check_n: int = Field(1000, ge=0, le=10**6)
    log_every: int = Field(100, ge=1)
    threads: int | None = Field(None, ge=1, description="torch CPU threads; None = auto (1 when the machine is busy)")


def _block(i: int, o: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))


class EvaluatorNet(nn.Module):
    """CNN with one head per concept (see the module docstring).

    Args:
        domain_sizes: number of values of each concept, in concept order.
        input_size, width, hidden: see :class:`LearnedConfig`.
    Forward: float ``[B, 3, S, S]`` in [0, 1] -> logits ``[B, sum(domain_sizes)]`` (split with
    :meth:`split_logits`).
    """

    def __init__(self, domain_sizes: list[int], input_size: int = 32, width: int = 16, hidden: int = 256):
        super().__init__()
        self.domain_sizes = list(domain_sizes)
        self.input_size = input_size
        w = width
        self.features = nn.Sequential(
            _block(5, w, 1), _block(w, w, 1),
            _block(w, 2 * w, 2), _block(2 * w, 2 * w, 1),
            _block(2 * w, 4 * w, 2), _block(4 * w, 4 * w, 1),
        )
        side = math.ceil(math.ceil(input_size / 2) / 2)
        self.trunk = nn.Sequential(nn.Flatten(), nn.Linear(4 * w * side * side, hidden), nn.ReLU(inplace=True), nn.Dropout(0.1))
        self.heads = nn.Linear(hidden, sum(domain_sizes))
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, input_size), torch.linspace(-1, 1, input_size), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - 0.5) / 0.25
        x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], 1)
        return self.heads(self.trunk(self.features(x)))

    def split_logits(self, logits: torch.Tensor) -> list[torch.Tensor]:
        """``[B, sum(D)]`` -> one ``[B, D_c]`` tensor per concept."""
        return list(torch.split(logits, self.domain_sizes, dim=1))


def to_input(images: np.ndarray | torch.Tensor, size: int) -> torch.Tensor:
    """uint8 ``[N, H, W, 3]`` (numpy) or ``[N, 3, H, W]`` (torch) -> float ``[N, 3, size, size]``
    in [0, 1], resized with bilinear antialiased interpolation."""
    x = torch.as_tensor(images)
    if x.ndim != 4:
        raise ValueError(f"images must be 4-D, got shape {list(x.shape)}")
    if x.shape[-1] == 3 and x.shape[1] != 3:
        x = x.permute(0, 3, 1, 2)
    x = x.float() / 255.0
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x


def augment(x: torch.Tensor, cfg: LearnedConfig, gen: torch.Generator) -> torch.Tensor:
    """Random generator-like artefacts on a batch ``[B, 3, S, S]`` in [0, 1], each applied with
    probability ``cfg.augment_p`` per image: Gaussian blur (sigma up to ``blur_max`` px of a 64 px
    image, scaled to S), per-channel gain/offset (colour shift) and Gaussian pixel noise."""
    B, _, S, _ = x.shape
    dev = x.device

    def coin():
        return (torch.rand(B, generator=gen) < cfg.augment_p).float().to(dev)

    if cfg.blur_max > 0:
        sigma = torch.rand(B, generator=gen).to(dev) * cfg.blur_max * S / 64.0 * coin()
        k = 2 * max(1, math.ceil(3 * cfg.blur_max * S / 64.0)) + 1
        t = torch.arange(k, device=dev, dtype=x.dtype) - k // 2
        g = torch.exp(-0.5 * (t[None] / sigma.clamp_min(1e-3)[:, None]) ** 2)
        g = g / g.sum(1, keepdim=True)  # [B, k]; sigma ~0 -> a delta
        w_h = g.repeat_interleave(3, 0)[:, None, None, :]  # [B*3, 1, 1, k]
        w_v = g.repeat_interleave(3, 0)[:, None, :, None]
        y = x.reshape(1, B * 3, S, S)
        y = F.conv2d(F.pad(y, (k // 2, k // 2, 0, 0), mode="replicate"), w_h, groups=B * 3)
        y = F.conv2d(F.pad(y, (0, 0, k // 2, k // 2), mode="replicate"), w_v, groups=B * 3)
        x = y.reshape(B, 3, S, S)
    if cfg.color_shift_max > 0:
        on = coin()[:, None, None, None]
        gain = 1 + (torch.rand(B, 3, 1, 1, generator=gen).to(dev) * 2 - 1) * cfg.color_shift_max * on
        off = (torch.rand(B, 3, 1, 1, generator=gen).to(dev) * 2 - 1) * cfg.color_shift_max * 100 / 255.0 * on
        x = x * gain + off
    if cfg.noise_max > 0:
        std = torch.rand(B, generator=gen).to(dev) * cfg.noise_max / 255.0 * coin()
        x = x + torch.randn(x.shape, generator=gen).to(dev) * std[:, None, None, None]
    return x.clamp(0, 1)


def render_pool(spec: Spec, split: str, n: int, size: int, start: int = 0,
                on_progress: Callable[[int, int], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``n`` samples of ``split`` and resize them for the model.

    Returns:
        images uint8 ``[n, 3, size, size]``; targets int64 ``[n, C]`` (index of each concept's value
        in its domain, concept order of ``spec.concepts``).
    """

    rend = get_renderer(backend_of(spec), supersample=spec.image.supersample)
    concepts = list(spec.concepts)
    images = torch.empty((n, 3, size, size), dtype=torch.uint8)
    targets = torch.empty((n, len(concepts)), dtype=torch.long)
    chunk = 512
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        scenes = [sample_scene(spec, split, start + i)[0] for i in range(a, b)]
        ims, _ = rend.render(scenes)
        images[a:b] = (to_input(ims, size) * 255.0).round().clamp(0, 255).to(torch.uint8)
        for i, s in enumerate(scenes):
            vals = labels(s, spec)
            targets[a + i] = torch.tensor([spec.domain(c).index(vals[c]) for c in concepts])
        if on_progress:
            on_progress(b, n)
    return images, targets


class LearnedEvaluator:
    """A trained :class:`EvaluatorNet` with its spec's concept domains.

    Attributes:
        name: ``"learned:<directory name>"``.
        concepts: concept names, in head order. domains: each concept's values.
        config: the :class:`LearnedConfig` it was trained with. report: its saved accuracy report.
    """

    def __init__(self, net: EvaluatorNet, concepts: list[str], domains: dict[str, list], config: LearnedConfig,
                 name: str = "learned", report: dict | None = None, device: str | torch.device = "cpu"):
        self.net = net.to(device).eval()
        self.concepts = concepts
        self.domains = domains
        self.config = config
        self.name = name
        self.report = report or {}
        self.device = torch.device(device)

    @torch.no_grad()
    def predict_proba(self, images: np.ndarray | torch.Tensor, batch_size: int = 512) -> list[np.ndarray]:
        """Per concept, float32 ``[N, D_c]`` probabilities over its domain for uint8 ``[N, H, W, 3]``
        (numpy, or a torch tensor on any device: generated images scored where they were made).

        Batches of ``batch_size`` go to the evaluator's device as uint8 (a quarter of the bytes of
        float) and are converted and resized there, so on an accelerator the CPU only gathers the
        argmaxes (:meth:`predict`)."""
        if isinstance(images, torch.Tensor):
            if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != torch.uint8:
                raise ValueError(f"images must be uint8 [N, H, W, 3], got {images.dtype} {list(images.shape)}")
        else:
            images = np.asarray(images)
            if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
                raise ValueError(f"images must be uint8 [N, H, W, 3], got {images.dtype} {list(images.shape)}")
        outs: list[list[np.ndarray]] = [[] for _ in self.concepts]
        for a in range(0, len(images), batch_size):
            x = to_input(torch.as_tensor(images[a:a + batch_size]).to(self.device, non_blocking=True), self.net.input_size)
            for j, lg in enumerate(self.net.split_logits(self.net(x))):
                outs[j].append(lg.softmax(1).float().cpu().numpy())
        return [np.concatenate(o) if o else np.zeros((0, len(self.domains[c])), np.float32) for o, c in zip(outs, self.concepts)]

    def predict(self, images: np.ndarray) -> list[dict]:
        """Concept values of each image (uint8 ``[N, H, W, 3]``): a list of N dicts concept -> value."""
        probs = self.predict_proba(images)
        idx = [p.argmax(1) for p in probs]
        return [{c: self.domains[c][int(idx[j][i])] for j, c in enumerate(self.concepts)} for i in range(len(images))]

    def reasons(self, images: np.ndarray, threshold: float = 0.6) -> list[list[str]]:
        """Per image, a note for every concept read with probability below ``threshold``."""
        probs = self.predict_proba(images)
        out = []
        for i in range(len(images)):
            notes = []
            for j, c in enumerate(self.concepts):
                p = probs[j][i]
                top = np.argsort(-p)[:2]
                if p[top[0]] < threshold:
                    notes.append(f"{c}: unsure between {self.domains[c][top[0]]!r} ({p[top[0]]:.2f}) and {self.domains[c][top[1]]!r} ({p[top[1]]:.2f})")
            out.append(notes)
        return out

    # -- persistence ---------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path, spec: Spec | None = None, device: str = "cpu") -> "LearnedEvaluator":
        """Load a trained evaluator directory (nothing is downloaded).

        Raises:
            MosaicError: missing files, another format, or concepts/domains that differ from
                ``spec`` (train one for it with ``mosaic evaluator train SPEC --out DIR``).
        """
        from safetensors.torch import load_file

        d = Path(directory)
        cfg_path = d / CONFIG_FILE
        retrain = "retrain it with `mosaic evaluator train SPEC --out DIR`, or use --evaluator parser"
        if not cfg_path.is_file() or not (d / WEIGHTS_FILE).is_file():
            raise MosaicError(f"{d} is not a trained evaluator: {CONFIG_FILE} or {WEIGHTS_FILE} is missing "
                              "(train one with `mosaic evaluator train SPEC --out DIR`, or use --evaluator parser)")
        meta = _read_json(cfg_path, retrain)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
            raise MosaicError(f"{cfg_path}: format {str(got)[:60]!r} is not {FORMAT!r}; {retrain}")
        if not isinstance(meta.get("concepts"), dict) or not all(isinstance(v, list) for v in meta["concepts"].values()) \
                or not isinstance(meta.get("config"), dict):
            raise MosaicError(f"{cfg_path} is damaged (concepts or config missing): {retrain}")
        concepts = list(meta["concepts"])
        domains = {c: list(v) for c, v in meta["concepts"].items()}
        if spec is not None:
            want = {c: list(spec.domain(c)) for c in spec.concepts}
            if want != domains:
                raise MosaicError(
                    f"evaluator {d} was trained for spec {meta.get('spec_name')!r} with concepts {domains}, but spec "
                    f"{spec.name!r} has {want}: train one for this spec with `mosaic evaluator train SPEC --out DIR`")
        try:
            cfg = LearnedConfig.model_validate(meta["config"])
        except ValueError as e:
            raise MosaicError(f"{cfg_path} is damaged (config: {str(e).splitlines()[0][:120]}): {retrain}") from None
        if not all(domains.values()):
            raise MosaicError(f"{cfg_path} is damaged (a concept without values): {retrain}")
        sizes = [len(domains[c]) for c in concepts]
        _check_weight_shapes(d / WEIGHTS_FILE, sizes, cfg, retrain)  # before a tensor is allocated: config.json may ask for GBs
        net = EvaluatorNet(sizes, cfg.input_size, cfg.width, cfg.hidden)
        try:
            net.load_state_dict(load_file(str(d / WEIGHTS_FILE)))
        except Exception as e:  # noqa: BLE001 - safetensors header errors, shapes that do not fit: the file is damaged
            raise MosaicError(f"{d / WEIGHTS_FILE} does not load ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}): "
                              f"{retrain}") from None
        report = _read_json(d / REPORT_FILE, retrain) if (d / REPORT_FILE).is_file() else {}
        report = report if isinstance(report, dict) else {}
        ev = cls(net, concepts, domains, cfg, name=f"learned:{d.name}", report=report, device=device)
        ev.spec_fingerprint = meta.get("spec_fingerprint")
        return ev

    def save(self, directory: str | Path, spec: Spec) -> None:
        """Write ``config.json`` and ``model.safetensors`` (and ``report.json`` if there is a report)."""
        from safetensors.torch import save

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT, "kind": "learned", "spec_name": spec.name, "spec_fingerprint": spec.fingerprint(),
            "spec": spec.to_dict(), "concepts": self.domains, "config": self.config.model_dump(mode="json"),
        }
        atomic_write(d / CONFIG_FILE, json.dumps(meta, indent=2) + "\n")
        # through a temporary file and a rename (as every other file): an interrupted save never leaves half a weights file
        # beside a whole config, and a link or hard link at the name is replaced, never written through
        atomic_write(d / WEIGHTS_FILE, save({k: v.detach().cpu().contiguous() for k, v in self.net.state_dict().items()}))
        if self.report:
            atomic_write(d / REPORT_FILE, json.dumps(self.report, indent=2) + "\n")


def shape_difference(path: Path, want: dict[str, tuple]) -> tuple[dict[str, tuple], str | None]:
    """The tensor shapes a safetensors file's header gives (read without loading a tensor) and the first
    tensor name whose shape differs from ``want`` (present in one only, or another shape), or None.

    Raises:
        whatever ``safetensors.safe_open`` raises on a header it cannot read (a damaged file)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    bad = sorted(set(want) ^ set(got)) or [k for k in want if want[k] != got[k]]
    return got, (bad[0] if bad else None)


def _check_weight_shapes(path: Path, sizes: list[int], cfg: LearnedConfig, fix: str) -> None:
    """The network that ``config.json`` describes (built on the meta device: no memory) must have
    exactly the tensors of the weights file (read from its header): a damaged config cannot make
    the load build a network of many GB before the weights are compared.

    Raises:
        MosaicError: an unreadable weights header, or shapes that differ (naming the first)."""
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in EvaluatorNet(sizes, cfg.input_size, cfg.width, cfg.hidden).state_dict().items()}
    try:
        got, k = shape_difference(path, want)
    except Exception as e:  # noqa: BLE001 - a header safetensors cannot read: the file is damaged
        raise MosaicError(f"{path} does not load ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}): {fix}") from None
    if k is not None:
        raise MosaicError(f"{path.parent / CONFIG_FILE} does not describe {path.name}: tensor {k!r} is {got.get(k, 'absent')} in the "
                          f"weights, the config (input_size {cfg.input_size}, width {cfg.width}, hidden {cfg.hidden}) gives "
                          f"{want.get(k, 'none')}; one of the two files is damaged or from another evaluator: {fix}")


def _read_json(path: Path, fix: str):
    """A JSON file of an evaluator folder, or MosaicError naming it (not UTF-8, not JSON, too deep)."""
    try:
        return read_json(path)
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
        raise MosaicError(f"{path} is damaged ({type(e).__name__}: {str(e)[:100]}): {fix}") from None


def train_evaluator(spec: Spec, out: str | Path, config: LearnedConfig | None = None,
                    on_log: Callable[[dict], None] | None = None,
                    on_progress: Callable[[str, int, int], None] | None = None) -> LearnedEvaluator:
    """Train a learned evaluator for ``spec`` and save it (with its accuracy report) to ``out``.

    The training pool is ``config.n_train`` renders of the ``evaluator_train`` split (every
    combination, held-out ones included); the report checks it on fresh ``evaluator_check``
    renders, clean and under the ``mild`` degradation (:func:`mosaic.evaluation.check_evaluator`).
    The loop runs under ``accelerate`` (CPU here, a GPU when one is present).

    Args:
        spec: the spec. out: output directory (created; files in it are replaced).
        config: training settings (defaults: :class:`LearnedConfig`).
        on_log: called with each log record (``step``, ``loss``, ``batch_accuracy``, ``seconds``).
        on_progress: called as ``(phase, done, total)`` with phase ``render``/``train``/``check``.
    Returns:
        the trained evaluator (in eval mode).
    """
    cfg = config or LearnedConfig()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(_auto_threads(cfg.threads))
    try:
        with FolderLock(out, MosaicError, "evaluator folder", wait=False):  # one trainer of a folder at a time
            return _train(spec, out, cfg, on_log, on_progress)
    finally:
        torch.set_num_threads(threads_before)


def _auto_threads(threads: int | None) -> int:
    if threads is not None:
        return threads
    import os

    n = torch.get_num_threads()
    try:
        busy = os.getloadavg()[0] >= (os.cpu_count() or 1) - 0.5
    except OSError:  # pragma: no cover - no load average on this platform
        busy = False
    return 1 if busy else n


def _train(spec, out, cfg, on_log, on_progress) -> LearnedEvaluator:
    from accelerate import Accelerator

    out = make_output_dir(out, "out")
    # a person's config.json, report.json or weights in the folder are never replaced (a retrain replaces its own)
    refuse_foreign_outputs(out, ("config.json", "model.safetensors", "report.json", "train_log.jsonl"), "config.json",
                           lambda d: isinstance(d, dict) and d.get("format") == FORMAT, "mosaic evaluator train", "an evaluator")
    torch.manual_seed(cfg.seed)
    concepts = list(spec.concepts)
    domains = {c: list(spec.domain(c)) for c in concepts}
    t0 = time.perf_counter()
    images, targets = render_pool(spec, "evaluator_train", cfg.n_train, cfg.input_size,
                                  on_progress=(lambda a, b: on_progress("render", a, b)) if on_progress else None)
    t_render = time.perf_counter() - t0

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    net = EvaluatorNet([len(domains[c]) for c in concepts], cfg.input_size, cfg.width, cfg.hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=0.15)
    net, opt, sched = accelerator.prepare(net, opt, sched)
    dev = accelerator.device
    images, targets = images.to(dev), targets.to(dev)
    gen = torch.Generator().manual_seed(cfg.seed)
    log = []
    t1 = time.perf_counter()
    net.train()
    running = None
    for step in range(1, cfg.steps + 1):
        idx = torch.randint(0, len(images), (cfg.batch_size,), generator=gen).to(dev)
        x = augment(images[idx].float() / 255.0, cfg, gen)
        logits = accelerator.unwrap_model(net).split_logits(net(x))
        y = targets[idx]
        loss = sum(F.cross_entropy(lg, y[:, j]) for j, lg in enumerate(logits))
        opt.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % cfg.log_every == 0 or step == cfg.steps:
            with torch.no_grad():
                acc = float(torch.stack([(lg.argmax(1) == y[:, j]).float().mean() for j, lg in enumerate(logits)]).mean())
            rec = {"step": step, "loss": round(running, 5), "batch_accuracy": round(acc, 4), "seconds": round(time.perf_counter() - t1, 2)}
            log.append(rec)
            if on_log:
                on_log(rec)
        if on_progress:
            on_progress("train", step, cfg.steps)
    t_train = time.perf_counter() - t1
    net = accelerator.unwrap_model(net).eval()
    ev = LearnedEvaluator(net, concepts, domains, cfg, name=f"learned:{out.name}", device=dev)
    report = {
        "spec": spec.name, "spec_fingerprint": spec.fingerprint(), "config": cfg.model_dump(mode="json"),
        "render_seconds": round(t_render, 2), "train_seconds": round(t_train, 2),
        "steps_per_second": round(cfg.steps / t_train, 2), "device": str(dev), "torch_threads": torch.get_num_threads(),
        "final_loss": log[-1]["loss"] if log else None,
    }
    if cfg.check_n > 0:
        for name in ("none", "mild"):
            report["check_" + ("clean" if name == "none" else name)] = check_evaluator(
                spec, ev, n=cfg.check_n, degrade=name,
                on_progress=(lambda a, b: on_progress("check", a, b)) if on_progress else None)
    ev.report = report
    ev.save(out, spec)
    with atomic_text_writer(out / LOG_FILE) as f:
        for rec in log:
            f.write(json.dumps(rec) + "\n")
    return ev
