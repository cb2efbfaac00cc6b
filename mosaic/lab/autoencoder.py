"""An autoencoder trained from scratch on a spec's renders, for latent diffusion (MOSAIC's protocol
without its pretrained SD2 VAE, which no model hub may provide here).

- **Model**: diffusers ``AutoencoderKL`` (Kingma & Welling 2014; the LDM / SD VAE architecture,
  Rombach et al. 2022) with ``latent_channels`` (4) latent channels and a downsampling factor
  ``factor`` (8 as SD-VAE: 128 px -> 16 x 16 x 4; 4 for small images: 32 px -> 8 x 8 x 4).
- **Data**: the first ``pool`` images of the spec's ``train`` split (seen combinations only: the
  latent space never sees a held-out combination's pixels), taken from the dataset when it exists
  or rendered on the fly (the same images: generation is deterministic), so the weights do not
  depend on where the images came from.
- **Objective**: per pixel ``l1 * |x' - x| + mse * (x' - x)^2 + edge * |grad x' - grad x|`` (finite
  differences in x and y: edges and thin shapes stay sharp; L1 and MSE keep flat colours exact),
  the L1 and MSE terms weighted ``1 + foreground`` on pixels that are not the image's background
  (its border's median colour) when ``foreground`` > 0,
  plus ``kl`` times the posterior's KL divergence per image divided by the pixel count (LDM's
  weighting of summed terms, 1e-6); AdamW, linear warm-up, gradient clipping, EMA of the weights
  (diffusers ``EMAModel``). Batches are a pure function of ``(seed, step)``, so a resumed training
  (``partial/checkpoint``, safetensors + JSON, no pickles) gives the weights of an unbroken one.
- **Latent scale**: after training, ``shift_factor`` and ``scaling_factor`` are set to the mean and
  1 / std of the posterior means of up to 512 training images, so latents are about unit scale
  (``z = (mean - shift) * scale``).
- **Quality check** (:func:`check_autoencoder`): fresh renders of the ``evaluator_check`` split
  (the whole combination grid, held-out cells included) are reconstructed (posterior mean ->
  decoder) and read by the evaluator (the scene parser by default), through the same
  :func:`mosaic.evaluation.check_evaluator` as the renders themselves; PSNR is reported. An
  autoencoder whose reconstructions are read below ``threshold`` (99 %) on any concept is
  refused for training (:class:`AutoencoderRefused`), with the numbers.
- **Cache** (:func:`resolve_autoencoder`): ``<root>/<spec name>-<spec fingerprint>-ae<hash of this
  section>/`` holds ``vae/`` (``save_pretrained``, safetensors), ``autoencoder.json`` (what was
  trained, on what, how long, final losses, the weights' sha256) and ``check-<key>.json`` (read as claims:
  :mod:`mosaic.lab.autoencoder_files`); every diffusion run on the
  same spec with the same section reuses it; concurrent runs wait for the one training it.

The autoencoder keeps its own short loop (like the learned evaluator): one model, one loss, no
conditioning, validation or processes; a frozen component of a diffusion run, not a model family.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Annotated, Callable, Literal

from pydantic import Field, model_validator

from mosaic.errors import ConfigError, TrainingError
from mosaic.lab.config import EMASection
from mosaic.schema import Seed, StrictModel
from mosaic.evaluation import check_evaluator, load_evaluator
from mosaic.io import atomic_dir, atomic_write, clear_temps, discard, own_folders, remove_path
from mosaic.lab.autoencoder_files import (VAE_FILES, checkpoint_problem, load_vae, own_training_folder, read_check, read_record,
                                          refuse_other_training, training_identity, vae_identity)
from mosaic.locks import FolderLock
from mosaic.sampling import sample_scene
from renderers import get_renderer

#: the per-concept accuracy reconstructions must reach (the evaluator reading decoded fresh renders)
DEFAULT_THRESHOLD = 0.99


class AutoencoderSection(StrictModel):
    """Shape and training of the autoencoder (``model.latent.autoencoder``, or the fields of
    ``mosaic autoencoder train``'s ``--set``)."""

    factor: Literal[2, 4, 8, 16] = Field(8, description="spatial downsampling: 8 (SD-VAE; 128 px -> 16 x 16) or 4 for small images")
    latent_channels: int = Field(4, ge=1, le=64, description="latent channels (SD-VAE and MOSAIC: 4)")
    block_out_channels: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        None, max_length=6, description="encoder/decoder widths, one per level (log2(factor) + 1 levels); null: 32, 64, 128, 128, ... ")
    layers_per_block: int = Field(1, ge=1, le=8)
    norm_num_groups: int = Field(16, ge=1, le=1024)
    steps: int = Field(3000, ge=1, le=10**8)
    batch_size: int = Field(32, ge=1, le=2**16)
    lr: float = Field(5e-4, gt=0, le=1.0)
    warmup_steps: int = Field(100, ge=0, le=10**8)
    weight_decay: float = Field(0.0, ge=0, le=10)
    grad_clip: float | None = Field(1.0, gt=0, le=1e6)
    l1: float = Field(1.0, ge=0, le=1e3, description="weight of the per-pixel L1 loss")
    mse: float = Field(1.0, ge=0, le=1e3, description="weight of the per-pixel squared error")
    edge: float = Field(1.0, ge=0, le=1e3, description="weight of the L1 loss on x/y finite differences (edges)")
    kl: float = Field(1e-6, ge=0, le=1.0, description="weight of the KL term (per image, divided by the pixel count; LDM: 1e-6)")
    foreground: float = Field(0.0, ge=0, le=1e3, description="extra L1/MSE weight of pixels off the image's background (foreground_mask)")
    ema: EMASection = Field(default_factory=lambda: EMASection(decay=0.999))
    pool: int = Field(4096, ge=1, le=10**7, description="training images: the first `pool` of the train split")
    seed: Seed = 0
    checkpoint_every: int = Field(500, ge=1, le=10**8, description="steps between resumable checkpoints (partial/)")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    check_n: int = Field(500, ge=1, le=10**6, description="fresh renders reconstructed and read by the evaluator")
    threshold: float = Field(DEFAULT_THRESHOLD, ge=0, le=1, description="per-concept accuracy the reconstructions must reach (0: never refuse; for tests)")
    evaluator: str = Field("parser", description="'parser' or a trained evaluator directory (mosaic evaluator train)")

    @model_validator(mode="after")
    def _levels(self):
        n = int(math.log2(self.factor)) + 1
        if self.block_out_channels is not None and len(self.block_out_channels) != n:
            raise ValueError(f"block_out_channels has {len(self.block_out_channels)} levels; factor {self.factor} needs {n} "
                             f"(log2(factor) + 1), e.g. {self.widths_for(n)}")
        for ch in self.widths:
            if ch % self.norm_num_groups:
                raise ValueError(f"norm_num_groups {self.norm_num_groups} does not divide the width {ch}: use a divisor, e.g. 8")
        return self

    @staticmethod
    def widths_for(levels: int) -> list[int]:
        return [min(32 * 2 ** k, 128) for k in range(levels)]

    @property
    def widths(self) -> list[int]:
        return list(self.block_out_channels or self.widths_for(int(math.log2(self.factor)) + 1))

    def weights_key(self) -> str:
        """Hash (10 hex) of every field that changes the trained weights (not the device, checkpoint
        cadence or the quality check)."""
        d = self.model_dump(mode="json", exclude={"device", "checkpoint_every", "check_n", "threshold", "evaluator"})
        d["block_out_channels"] = self.widths
        d.pop("foreground") if not d["foreground"] else None  # added later: the keys of those trained without it stay
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


class AutoencoderRefused(TrainingError):
    """The autoencoder's reconstructions are read below the threshold: it is not used for training."""


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------


def check_fits(sec: AutoencoderSection, image_size: int, field: str = "model.latent.autoencoder.factor") -> None:
    """Raises ConfigError when ``factor`` does not divide the image size into at least 2 x 2 latents."""
    if image_size % sec.factor or image_size // sec.factor < 2:
        raise ConfigError([(field, f"{sec.factor} does not divide {image_size} px images into at least 2 x 2 latents: use a factor "
                            f"that divides {image_size} and is at most {image_size // 2} (4 for 32 px, 8 for 128 px)")])


def build_autoencoder(sec: AutoencoderSection, image_size: int):
    """A fresh ``diffusers.AutoencoderKL`` (RGB in and out, ``sec.latent_channels`` latents at
    ``image_size / sec.factor``). Raises ConfigError (:func:`check_fits`)."""
    from diffusers import AutoencoderKL

    check_fits(sec, image_size)
    n = len(sec.widths)
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
                         up_block_types=("UpDecoderBlock2D",) * n, block_out_channels=tuple(sec.widths),
                         layers_per_block=sec.layers_per_block, latent_channels=sec.latent_channels,
                         norm_num_groups=sec.norm_num_groups, sample_size=image_size)


class LatentSpace:
    """A trained, frozen autoencoder as the diffusion model's space.

    ``encode(x float [B,3,S,S] in [-1,1]) -> z float [B,C,S/f,S/f]`` (posterior mean, shifted and
    scaled); ``decode(z) -> x float [B,3,S,S]`` (not clamped). ``channels``, ``factor``,
    ``folder``; ``size(image_size)`` is the latent side.
    """

    def __init__(self, vae, folder: Path | None = None):
        self.vae = vae.eval().requires_grad_(False)
        self.folder = Path(folder) if folder is not None else None
        c = vae.config
        self.channels = int(c.latent_channels)
        self.factor = 2 ** (len(c.block_out_channels) - 1)
        self.scale = float(c.scaling_factor)
        self.shift = float(c.shift_factor or 0.0)

    def size(self, image_size: int) -> int:
        return image_size // self.factor

    def to(self, device) -> "LatentSpace":
        self.vae.to(device)
        return self

    @property
    def device(self):
        return next(self.vae.parameters()).device

    def encode(self, x, sample_generator=None):
        import torch

        with torch.no_grad():
            post = self.vae.encode(x.to(self.device)).latent_dist
            z = post.mean if sample_generator is None else post.sample(generator=sample_generator)
            return (z - self.shift) * self.scale

    def decode(self, z):
        import torch

        with torch.no_grad():
            return self.vae.decode(z.to(self.device).float() / self.scale + self.shift).sample

    def reconstruct_uint8(self, images, batch_size: int = 64):
        """uint8 numpy ``[N, S, S, 3]`` -> reconstructions, uint8 numpy ``[N, S, S, 3]``."""
        import numpy as np
        import torch

        from mosaic.lab.data import to_float, to_uint8

        out = []
        for a in range(0, len(images), batch_size):
            x = to_float(torch.from_numpy(np.ascontiguousarray(images[a:a + batch_size])).permute(0, 3, 1, 2))
            out.append(to_uint8(self.decode(self.encode(x))))
        return np.concatenate(out) if out else images[:0].copy()


def load_space(folder: str | Path) -> LatentSpace:
    """The :class:`LatentSpace` of a trained autoencoder folder (``folder/vae``).

    Raises:
        TrainingError: no trained autoencoder there; a damaged or foreign one
            (:func:`mosaic.lab.autoencoder_files.load_vae`).
    """
    folder = Path(folder)
    return LatentSpace(load_vae(folder), folder)  # vae/ checked first: safetensors only, the weights autoencoder.json records


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------


def training_pool(spec, n: int, images=None, say: Callable[[str], None] = print):
    """uint8 ``[n', 3, S, S]`` torch tensor: the first ``n`` images of the ``train`` split (``images``
    when given, e.g. the dataset's, else rendered), ``n' = min(n, split size)``."""
    import numpy as np
    import torch

    total = spec.split_sizes().get("train", 0)
    if total < 1:
        raise ConfigError([("splits.train", "the spec has no train split: the autoencoder trains on the train split's renders")])
    n = min(n, total)
    if images is not None:
        return images[:n]

    say(f"rendering {n} training images of {spec.name} for the autoencoder")
    r = get_renderer("pillow", supersample=spec.image.supersample)
    out = []
    for a in range(0, n, 256):
        scenes = [sample_scene(spec, "train", i)[0] for i in range(a, min(n, a + 256))]
        out.append(r.render(scenes)[0])
    return torch.from_numpy(np.ascontiguousarray(np.concatenate(out))).permute(0, 3, 1, 2).contiguous()


def foreground_mask(x, tol: float = 0.04):
    """float ``[B,1,S,S]``: 1 where a pixel of ``x`` (float ``[B,3,S,S]`` in [-1, 1]) is off its image's
    background (the per-channel median of its border pixels, robust to objects touching the border)
    by more than ``tol`` in some channel, else 0."""
    import torch

    bg = torch.cat([x[..., 0, :], x[..., -1, :], x[..., :, 0], x[..., :, -1]], -1).median(-1).values[..., None, None]
    return ((x - bg).abs().amax(1, keepdim=True) > tol).float()


def reconstruction_loss(sec: AutoencoderSection, rec, x, kl_per_image):
    """Scalar loss (see the module docstring): ``rec``, ``x`` float ``[B,3,S,S]``; ``kl_per_image`` ``[B]``."""
    d = rec.float() - x
    w = 1.0 + sec.foreground * foreground_mask(x) if sec.foreground else 1.0  # objects: a few % of a 128 px render
    loss = sec.l1 * (w * d.abs()).mean() + sec.mse * (w * d.pow(2)).mean()
    if sec.edge:
        dx = (rec[..., :, 1:] - rec[..., :, :-1]) - (x[..., :, 1:] - x[..., :, :-1])
        dy = (rec[..., 1:, :] - rec[..., :-1, :]) - (x[..., 1:, :] - x[..., :-1, :])
        loss = loss + sec.edge * 0.5 * (dx.abs().mean() + dy.abs().mean())
    if sec.kl:
        loss = loss + sec.kl * kl_per_image.mean() / x[0].numel()
    return loss


def _lr_at(sec: AutoencoderSection, step: int) -> float:
    return sec.lr * min(1.0, step / sec.warmup_steps) if sec.warmup_steps else sec.lr


def _device(sec: AutoencoderSection):
    import torch

    if sec.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError([("model.latent.autoencoder.device", "cuda, but this machine has no CUDA GPU: use auto or cpu")])
    return torch.device("cuda" if sec.device != "cpu" and torch.cuda.is_available() else "cpu")


def _save_checkpoint(path: Path, step: int, vae, opt, ema, losses: list, ident: dict) -> None:
    """``path/`` = ``state.safetensors`` (weights, EMA, AdamW moments) + ``state.json`` (with ``ident``: spec, section); atomic."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_temps(path)  # an unfinished checkpoint, or a link planted at its name: removed, never followed (the folder is locked)
    with atomic_dir(path) as tmp:  # a unique new folder that replaces path (a link there is removed, not written through)
        _write_checkpoint(tmp, step, vae, opt, ema, losses, ident)


def _write_checkpoint(tmp: Path, step: int, vae, opt, ema, losses: list, ident: dict) -> None:
    from safetensors.torch import save_file

    t = {f"vae.{k}": v.detach().cpu().contiguous() for k, v in vae.state_dict().items()}
    for i, p in enumerate(ema.shadow_params):
        t[f"ema.{i}"] = p.detach().cpu().contiguous()
    osd = opt.state_dict()
    for i, st in osd["state"].items():
        for k, v in st.items():
            t[f"opt.{i}.{k}"] = v.detach().cpu().contiguous() if hasattr(v, "detach") else __import__("torch").tensor(v)
    save_file(t, str(tmp / "state.safetensors"))
    meta = {"step": step, "ema_optimization_step": ema.optimization_step, "param_groups": osd["param_groups"], "losses": losses, **ident}
    (tmp / "state.json").write_text(json.dumps(meta) + "\n")


def _load_checkpoint(path: Path, vae, opt, ema, steps: int, ident: dict) -> tuple[int, list]:
    from safetensors.torch import load_file

    if (problem := checkpoint_problem(meta := read_record(path / "state.json", "checkpoint"), steps, ident)) is not None:
        raise TrainingError(problem)  # a step past the losses it saved, or of another spec or section (attack round 21)
    t = load_file(str(path / "state.safetensors"))
    vae.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("vae.")})
    dev = next(vae.parameters()).device
    for i, p in enumerate(ema.shadow_params):
        p.data.copy_(t[f"ema.{i}"].to(dev))
    ema.optimization_step = meta["ema_optimization_step"]
    state: dict = {}
    for k, v in t.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v.to(dev) if name != "step" else v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return meta["step"], list(meta["losses"])


def train_autoencoder(sec: AutoencoderSection, spec, out: str | Path, images=None, say: Callable[[str], None] = print,
                      progress: bool = True) -> dict:
    """Train (or finish, or find) the autoencoder of ``spec`` in ``out`` (see the module docstring).

    Torch's global RNG is left as it was (``torch.random.fork_rng``): a diffusion run's initial weights do not
    depend on whether its autoencoder was cached.
    Args:
        images: uint8 ``[N, 3, S, S]`` train-split images (the dataset's), or None to render them.
        progress: a rich progress bar.
    Returns:
        ``autoencoder.json``'s record: ``spec``, ``spec_fingerprint``, ``section``, ``params``, ``image_size``, ``latent_shape``, ``steps``, ``train_s``, ``final_loss``, ``scaling_factor``, ``shift_factor``, ``posterior_std_over_latent_std``; ``already_trained`` when it was there.
    Raises:
        ConfigError: a factor that does not fit the image size, cuda without a GPU.
    """
    import torch

    check_fits(sec, spec.image.size)
    with FolderLock(out := Path(out), TrainingError, "autoencoder folder", wait=True):
        own_training_folder(out)  # a person's vae/ or partial/ is never replaced or deleted
        if (record := out / "autoencoder.json").is_file():  # another spec or section: refused, even with its weights gone
            refuse_other_training(rec := read_record(record), training_identity(sec, spec), out)
            if all((out / "vae" / f).is_file() for f in VAE_FILES):  # else trained again
                return {**rec, "already_trained": True}
        with torch.random.fork_rng(devices=[]):
            return _train(sec, spec, out, images, say, progress)


def _train(sec, spec, out: Path, images, say, progress: bool) -> dict:
    import torch
    from diffusers.training_utils import EMAModel

    from mosaic.lab.data import step_seed, to_float

    dev = _device(sec)
    torch.manual_seed(sec.seed)
    vae = build_autoencoder(sec, spec.image.size).to(dev)
    pool = training_pool(spec, sec.pool, images, say)
    params = [p for p in vae.parameters()]
    opt = torch.optim.AdamW(params, lr=sec.lr, weight_decay=sec.weight_decay)
    ema = EMAModel(params, decay=sec.ema.decay, use_ema_warmup=sec.ema.warmup, power=sec.ema.power,
                   update_after_step=sec.ema.update_after_step)
    ema.to(dev)
    ck = (partial := out / "partial") / "checkpoint"
    start, losses = 0, []
    own_folders(out, ["partial"])  # a link at partial/ is removed: never resumed from, nor written into, another folder
    if (ck / "state.json").is_file():
        try:
            start, losses = _load_checkpoint(ck, vae, opt, ema, sec.steps, training_identity(sec, spec))
            say(f"autoencoder: resumed from {ck} (step {start})")
        except Exception as e:  # noqa: BLE001 - a damaged checkpoint, or one of another spec or section: start over
            say(f"autoencoder: checkpoint {ck} is damaged or not this training's ({type(e).__name__}: {str(e)[:200]}); starting over")
            discard(ck)  # a link at its name is removed, never followed
            start, losses = 0, []
    n = len(pool)
    t_train = 0.0
    bar = _progress(progress, sec.steps, start, f"autoencoder {spec.name}")
    vae.train()
    try:
        for step in range(start + 1, sec.steps + 1):
            t0 = time.perf_counter()
            seed = step_seed(sec.seed, step, 0)
            g = torch.Generator().manual_seed(seed)
            idx = torch.randint(0, n, (min(sec.batch_size, n),), generator=g)
            x = to_float(pool[idx]).to(dev)
            for group in opt.param_groups:
                group["lr"] = _lr_at(sec, step)
            post = vae.encode(x).latent_dist
            z = post.sample(generator=torch.Generator(device=dev).manual_seed(seed))
            rec = vae.decode(z).sample
            loss = reconstruction_loss(sec, rec, x, post.kl())
            if not math.isfinite(loss.item()):
                raise TrainingError(f"autoencoder training stopped at step {step}: the loss is {loss.item()}; lower "
                                    "model.latent.autoencoder.lr and train again")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if sec.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, sec.grad_clip)
            opt.step()
            ema.step(params)
            t_train += time.perf_counter() - t0
            losses.append(round(loss.item(), 6))
            if bar is not None:
                bar[0].update(bar[1], advance=1, loss=f"{loss.item():.4f}")
            if (bar is None or not bar[0].console.is_terminal) and (step % max(1, sec.steps // 20) == 0 or step == sec.steps):
                say(f"autoencoder step {step}/{sec.steps}: loss {loss.item():.4f} ({t_train:.0f} s)")  # a log file gets lines
            if step % sec.checkpoint_every == 0 and step < sec.steps:
                _save_checkpoint(ck, step, vae, opt, ema, losses, training_identity(sec, spec))
    finally:
        if bar is not None:
            bar[0].stop()
    ema.copy_to(params)
    vae.eval()
    # latent statistics: shift and scale to about zero mean, unit variance (posterior means of the pool)
    with torch.no_grad():
        xs = to_float(pool[: min(512, n)]).to(dev)
        posts = [vae.encode(xs[a:a + 64]).latent_dist for a in range(0, len(xs), 64)]
        means = torch.cat([p.mean for p in posts])
        stds = torch.cat([p.std for p in posts])
    shift, std = float(means.mean()), float(means.std())
    scale = 1.0 / max(std, 1e-6)
    vae.register_to_config(scaling_factor=scale, shift_factor=shift)
    clear_temps(partial / "vae")  # saved into the unfinished training's own folder, moved to vae/ once recorded (round 24)
    with atomic_dir(partial / "vae") as tmp:  # a unique new folder; a link at its name is removed, never written through
        vae.save_pretrained(str(tmp), safe_serialization=True)
    rec = {"spec": spec.name, "spec_fingerprint": spec.fingerprint(), "section": sec.model_dump(mode="json"),
           "weights_key": sec.weights_key(), "params": sum(p.numel() for p in params), "image_size": spec.image.size,
           "latent_shape": [sec.latent_channels, spec.image.size // sec.factor, spec.image.size // sec.factor],
           "train_images": n, "steps": sec.steps, "resumed_at": start, "train_s": t_train, "device": str(dev),
           "final_loss": sum(losses[-50:]) / max(len(losses[-50:]), 1), "loss_every_step": losses[:: max(1, len(losses) // 200)],
           "scaling_factor": scale, "shift_factor": shift,
           # the posterior's spread against the latents' spread: why the cache stores the mean (docs/latent.md)
           "posterior_std_over_latent_std": float(stds.mean()) / max(std, 1e-12),
           **vae_identity(partial)}  # load_space refuses a vae/ with other weights, or an edited vae/config.json
    atomic_write(out / "autoencoder.json", json.dumps(rec, indent=2) + "\n")
    remove_path(out / "vae")  # an older vae/ (checked as mosaic's own above); stopped here, a rerun trains again
    (partial / "vae").replace(out / "vae")
    discard(partial)
    say(f"autoencoder: {rec['params'] / 1e6:.2f} M parameters, {sec.steps} steps in {rec['train_s']:.0f} s, loss {rec['final_loss']:.4f} "
        f"-> {out}")
    return rec


def _progress(enabled: bool, total: int, done: int, desc: str):
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
                 TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
    p.start()
    return p, p.add_task(desc, total=total, completed=done, loss="-")


# ----------------------------------------------------------------------------------------------
# the quality check
# ----------------------------------------------------------------------------------------------


class _Reconstructed:
    """An evaluator that reads the autoencoder's reconstructions of the images it is given, and
    keeps the PSNR of each reconstruction against its input."""

    def __init__(self, inner, space: LatentSpace):
        self.inner, self.space = inner, space
        self.name = inner.name
        self.psnr: list[float] = []
        self.mse: list[float] = []
        if hasattr(inner, "read"):
            self.read = self._read
        if hasattr(inner, "explain"):
            self.explain = lambda images: inner.explain(self.space.reconstruct_uint8(images))

    def _rec(self, images):
        import numpy as np

        rec = self.space.reconstruct_uint8(images)
        err = ((rec.astype(np.float64) - images.astype(np.float64)) ** 2).reshape(len(images), -1).mean(axis=1)
        self.mse += err.tolist()
        self.psnr += [float(10 * np.log10(255.0 ** 2 / e)) if e > 0 else float("inf") for e in err]
        return rec

    def predict(self, images):
        return self.inner.predict(self._rec(images))

    def _read(self, images):
        return self.inner.read(self._rec(images))


def check_autoencoder(space: LatentSpace, spec, n: int = 500, evaluator: str = "parser", threshold: float = DEFAULT_THRESHOLD,
                      device: str = "cpu") -> dict:
    """The evaluator on reconstructions of ``n`` fresh ground-truth renders (the ``evaluator_check``
    split, :func:`mosaic.evaluation.check_evaluator`), next to the same check on the renders.

    Returns:
        ``{"passed", "threshold", "n", "evaluator", "spec", "spec_fingerprint", "accuracy"
        (concept -> fraction on reconstructions), "joint_accuracy", "seen", "held_out",
        "renders_accuracy" (the evaluator on the renders themselves), "psnr_db" (of the mean squared
        error over all images), "psnr_db_min" (worst image), "below_threshold", "seconds",
        "failures"}``.
    """
    import numpy as np

    t0 = time.perf_counter()
    ev = load_evaluator(spec, evaluator, device=device)
    raw = check_evaluator(spec, ev, n=n)
    wrapped = _Reconstructed(ev, space)
    rec = check_evaluator(spec, wrapped, n=n)
    below = [c for c, v in rec["accuracy"].items() if v is None or v < threshold]
    mse = float(np.mean(wrapped.mse)) if wrapped.mse else float("nan")
    return {
        "passed": not below, "threshold": threshold, "n": n, "evaluator": ev.name, "spec": spec.name,
        "spec_fingerprint": spec.fingerprint(), "accuracy": rec["accuracy"], "joint_accuracy": rec["joint_accuracy"],
        "seen": rec["seen"], "held_out": rec["held_out"], "renders_accuracy": raw["accuracy"],
        "renders_joint_accuracy": raw["joint_accuracy"], "below_threshold": below,
        "psnr_db": float(10 * np.log10(255.0 ** 2 / mse)) if mse > 0 else float("inf"),
        "psnr_db_min": float(min(wrapped.psnr)) if wrapped.psnr else None,
        "seconds": round(time.perf_counter() - t0, 2), "failures": rec.get("failures", [])[:4],
    }


def check_key(sec: AutoencoderSection, spec) -> str:
    return hashlib.sha256(json.dumps([spec.fingerprint(), sec.check_n, sec.evaluator, sec.threshold]).encode()).hexdigest()[:10]


def checked(folder: Path, sec: AutoencoderSection, spec, space: LatentSpace | None = None, say=print) -> dict:
    """The quality check of the autoencoder in ``folder`` on ``spec`` (``check-<key>.json``): computed once per
    weights and vae/config.json (the record names both sha256; a damaged record, one of other weights or config, is measured again)."""
    path = Path(folder) / f"check-{check_key(sec, spec)}.json"
    space = space or load_space(folder)
    identity = vae_identity(Path(folder))  # the weights' and vae/config.json's sha256
    saved = read_check(path, identity)  # damaged, or measured on other weights or another config: measured again
    if saved is not None:
        return saved
    say(f"autoencoder: the {sec.evaluator} evaluator reads reconstructions of {sec.check_n} fresh renders")
    res = check_autoencoder(space, spec, n=sec.check_n, evaluator=sec.evaluator, threshold=sec.threshold, device=str(space.device))
    res.update(identity)
    atomic_write(path, json.dumps(res, indent=2, sort_keys=True, default=str) + "\n")
    return res


def refuse_unless_passed(res: dict, folder: Path, field: str = "model.latent.autoencoder") -> None:
    """Raise :class:`AutoencoderRefused` with the numbers when the check did not pass."""
    if res["passed"]:
        return
    def pct(v):
        return "unreadable" if v is None else f"{100 * v:.1f} %"

    acc = ", ".join(f"{c} {pct(v)}" for c, v in res["accuracy"].items())
    raw = ", ".join(f"{c} {pct(v)}" for c, v in res["renders_accuracy"].items())
    raise AutoencoderRefused([(field, f"the autoencoder {folder} is refused: the {res['evaluator']} evaluator reads its "
                               f"reconstructions of {res['n']} fresh renders at {acc} (renders: {raw}); every concept must reach "
                               f"{100 * res['threshold']:.0f} % ({', '.join(res['below_threshold'])} below); PSNR "
                               f"{res['psnr_db']:.1f} dB. Train it longer or wider ({field}.steps, .block_out_channels), or use a "
                               "smaller factor; delete the folder to retrain")])


def cache_dir(root: str | Path, spec, sec: AutoencoderSection) -> Path:
    """``<root>/<spec name>-<spec fingerprint 12>-ae<weights key>``."""
    return Path(root) / f"{spec.name}-{spec.fingerprint()[:12]}-ae{sec.weights_key()}"


def resolve_autoencoder(latent, spec, images=None, say: Callable[[str], None] = print, train: bool = True,
                        progress: bool = True) -> LatentSpace:
    """The checked :class:`LatentSpace` of a ``model.latent`` section on ``spec``: ``latent.path``,
    or the cache (trained first when missing and ``train``).

    Raises:
        ConfigError: ``latent.path`` holds no autoencoder; a factor that does not fit the images.
        TrainingError: no cached autoencoder and ``train`` is False.
        AutoencoderRefused: it fails the quality check.
    """
    sec = latent.autoencoder
    check_fits(sec, spec.image.size)
    if latent.path is not None:
        folder = Path(latent.path)
        if not (folder / "vae" / "config.json").is_file():
            raise ConfigError([("model.latent.path", f"{str(folder)!r} holds no trained autoencoder (vae/config.json is missing): "
                                "give a folder made by `mosaic autoencoder train`, or set it null to use the cache")])
    else:
        folder = cache_dir(latent.root, spec, sec)
        if not (folder / "autoencoder.json").is_file():
            if not train:
                raise TrainingError(f"no trained autoencoder in {folder}: train it with `mosaic autoencoder train`")
            train_autoencoder(sec, spec, folder, images=images, say=say, progress=progress)
    space = load_space(folder)
    if space.size(spec.image.size) * space.factor != spec.image.size:
        raise ConfigError([("model.latent.path", f"the autoencoder in {folder} (factor {space.factor}) does not fit {spec.image.size} px")])
    res = checked(folder, sec, spec, space, say=say)
    say(f"autoencoder {folder.name}: reconstructions read at " + ", ".join(f"{c} {100 * (v or 0):.1f} %" for c, v in res["accuracy"].items())
        + f", PSNR {res['psnr_db']:.1f} dB")
    refuse_unless_passed(res, folder, "model.latent.path" if latent.path is not None else "model.latent.autoencoder")
    return space


__all__ = ["AutoencoderSection", "AutoencoderRefused", "LatentSpace", "build_autoencoder", "cache_dir", "check_autoencoder",
           "check_fits", "checked", "load_space", "refuse_unless_passed", "resolve_autoencoder", "train_autoencoder",
           "training_pool"]
