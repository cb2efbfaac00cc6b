"""The diffusion objective as a :class:`~mosaic.lab.loop.Task`: DDPM loss (optionally Min-SNR
weighted) or flow matching (SD3: logit-normal timesteps, SD3 loss weighting), with condition
dropout, in pixel space or on an autoencoder's cached latents (``model.latent``); validation on
``val`` (loss, and evaluator accuracy of generated images), weight export and loading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mosaic.errors import ConfigError, TrainingError
from mosaic.evaluation.learned import shape_difference
from mosaic.lab.data import split_names, to_float
from mosaic.lab.diffusion.config import DiffusionConfig, FlowSection
from mosaic.lab.diffusion.model import DiffusionModel, build_backbone, check_model_fits
from mosaic.lab.diffusion.sampling import generate, load_evaluator, sample_seeds
from mosaic.lab.checkpoint import check_weights_meaning, load_weights_file, read_weights_record
from mosaic.lab.loop import Task
from mosaic.lab.run_folder import RunFolder
from mosaic.dataset import read_metadata, spec_of
from mosaic.io import atomic_write, read_json
from mosaic.lab.autoencoder import resolve_autoencoder
from mosaic.lab.diffusion.conditioning import (
    CaptionConditioner, CombinationConditioner, FactorizedConditioner, OneHotConditioner, build_vocab,
)
from mosaic.lab.diffusion.latent import cached_latents
from mosaic.records import sample_record
from mosaic.stream import StreamSource
from mosaic.torch_data import MosaicDataset


class _CondOf:
    """``records -> {"cond": conditioner.encode(records)}`` for a streamed batch (picklable)."""

    def __init__(self, conditioner):
        self.conditioner = conditioner

    def __call__(self, records):
        return {"cond": self.conditioner.encode(records)}


def make_noise_scheduler(schedule, latent: bool = False):
    """The training scheduler of ``model.schedule``: ``FlowMatchEulerDiscreteScheduler`` (flow
    matching, SD3 shift) or ``DDPMScheduler`` (x0 clipped to [-1, 1] in pixel space only: latents
    are not bounded)."""
    if schedule.flow_matching:
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=schedule.num_train_timesteps, shift=(schedule.flow or _flow()).shift)
    from diffusers import DDPMScheduler

    betas = {k: v for k, v in (("beta_start", schedule.beta_start), ("beta_end", schedule.beta_end)) if v is not None}
    return DDPMScheduler(num_train_timesteps=schedule.num_train_timesteps, beta_schedule=schedule.beta_schedule,
                         prediction_type=schedule.prediction_type, clip_sample=not latent, clip_sample_range=1.0, **betas)


def _flow():
    return FlowSection()


def flow_matching_loss(noise_sched, flow, model, x0, cond, drop, generator, u=None, noise=None):
    """Rectified-flow loss of one batch, as diffusers' ``train_dreambooth_sd3.py`` (MOSAIC's DiT):
    ``u`` in [0, 1) per sample (default: drawn by ``compute_density_for_timestep_sampling`` with
    ``flow.weighting``) picks the scheduler's shifted sigma ``s`` and timestep ``1000 s``;
    ``x_t = (1 - s) x0 + s noise``; with ``precondition_outputs`` the loss compares
    ``x_t - s * output`` with ``x0``, else ``output`` with ``noise - x0``; per-sample weights
    ``compute_loss_weighting_for_sd3`` (ones for ``logit_normal``). Returns a float32 scalar."""
    from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

    b, dev = x0.shape[0], x0.device
    if noise is None:
        noise = torch.randn(x0.shape, generator=generator, device=dev)
    if u is None:
        scheme = flow.weighting if flow.weighting in ("logit_normal", "mode") else "uniform"
        u = compute_density_for_timestep_sampling(scheme, b, logit_mean=flow.logit_mean, logit_std=flow.logit_std,
                                                  mode_scale=flow.mode_scale, device=dev, generator=generator)
    T = noise_sched.config.num_train_timesteps
    idx = (u * T).long().clamp(0, T - 1).cpu()
    sigmas = noise_sched.sigmas[idx].to(dev, torch.float32)
    timesteps = noise_sched.timesteps[idx].to(dev)
    s = sigmas.view(b, *([1] * (x0.dim() - 1)))
    xt = (1.0 - s) * x0 + s * noise
    pred = model(xt, timesteps, cond, drop).float()
    if flow.precondition_outputs:
        pred, target = pred * (-s) + xt, x0
    else:
        target = noise - x0
    w = compute_loss_weighting_for_sd3(flow.weighting, s).float()
    return (w * (pred - target.float()) ** 2).reshape(b, -1).mean(dim=1).mean()


class DiffusionTask(Task):
    """The diffusion objective on a mosaic dataset (see the module docstring).

    Args:
        cfg: the run's config.
        dataset_root: a complete dataset directory.
        run: the run folder (the caption vocabulary is kept there), or None.
        train: load the train split into memory (False for sampling only).
    Raises:
        ConfigError: a model that does not fit the image size.
        DatasetError: missing splits.
    """

    def __init__(self, cfg: DiffusionConfig, dataset_root: Path, run: RunFolder | None = None, train: bool = True):
        self.cfg, self.root, self.run = cfg, Path(dataset_root), run
        if not train and run is not None:  # a run read back: its config must mean what its weights were trained with
            for d in (run.best, run.final):
                if d.is_dir():
                    check_weights_meaning(read_weights_record(d), self.weights_meaning(), run.config, d)
        self.spec = spec_of(self.root)
        self.image_size = self.spec.image.size
        self.concepts = list(self.spec.concepts)
        m = cfg.model
        self.space = None  # the autoencoder's LatentSpace (model.latent), None in pixel space
        if m.latent is not None:
            self.space = self._latent_space(train)
        # the backbone's input: pixels [3, S, S], or latents [C, S/f, S/f]
        self.model_size = self.space.size(self.image_size) if self.space is not None else self.image_size
        self.model_channels = self.space.channels if self.space is not None else 3
        check_model_fits(cfg.model, self.model_size)
        self.noise = make_noise_scheduler(m.schedule, latent=self.space is not None)
        self.conditioner = self._conditioner()
        if not train and run is not None:  # a run read back (sample, analyze): its config must describe its weights
            self._check_weight_shapes(run)
        self.model = DiffusionModel(build_backbone(m, self.model_size, self.model_channels), self.conditioner, m.backbone,
                                    pooled=m.mmdit_.pooled)
        self.train_data = {}
        self.train_source = None
        if train and cfg.dataset.stream and self.space is not None:
            raise ConfigError([("dataset.stream", "true, but latent diffusion (model.latent) trains on the cached latents of the "
                                "dataset's train split: set dataset.stream: false")])
        if train and cfg.dataset.stream:
            self.train_source = StreamSource(self.spec, "train", _CondOf(self.conditioner), workers=cfg.dataset.workers)
        elif train:
            ds = MosaicDataset(self.root, "train")
            if self.space is not None:
                self.train_data = {"latent": self._latents("train", ds.images), "cond": self.conditioner.encode(ds.records)}
            else:
                self.train_data = {"image": ds.images, "cond": self.conditioner.encode(ds.records)}
        splits = self.spec.split_sizes()
        self.val_records = read_metadata(self.root, "val") if splits.get("val") else []
        self._val_images = None
        self._evaluator = None
        self._device = "cpu"
        self.selection = ("val/joint_accuracy", "max") if cfg.evaluation.select == "joint_accuracy" else ("val/loss", "min")

    # -- latent space ------------------------------------------------------------------------------
    def _latent_space(self, train: bool):
        """The run's autoencoder, resolved (trained on first use: the main process first) and
        checked; on the process's device. Torch's global RNG is left untouched."""

        state, ctx = _process_state()
        images = None
        if train:
            if "train" in self.spec.split_sizes() and (self.root / "train").exists():
                images = MosaicDataset(self.root, "train").images
        with ctx:
            with torch.random.fork_rng(devices=[]):
                space = resolve_autoencoder(self.cfg.model.latent, self.spec, images=images, train=train,
                                            say=_say_main(state), progress=state is None or state.is_main_process)
        return space.to(state.device if state is not None else "cpu")

    def _latents(self, split: str, images: torch.Tensor) -> torch.Tensor:
        """Cached latents of the first ``len(images)`` images of ``split`` (main process first)."""

        state, ctx = _process_state()
        with ctx:
            return cached_latents(self.space, self.root, split, images, say=_say_main(state))

    def to_model_space(self, x: torch.Tensor) -> torch.Tensor:
        """float ``[B, 3, S, S]`` images in [-1, 1] -> what the backbone denoises (latents, or the images)."""
        return self.space.encode(x).to(x.device) if self.space is not None else x

    # -- conditioning ------------------------------------------------------------------------------
    def _conditioner(self):
        m = self.cfg.model
        domains = {c: self.spec.domain(c) for c in self.concepts}
        if m.conditioning == "factorized":
            return FactorizedConditioner(domains, m.cond_dim)
        if m.conditioning == "onehot":
            o = m.onehot_
            return OneHotConditioner(domains, m.cond_dim, hidden=o.hidden, tokens=o.tokens, dropout=o.dropout)
        if m.conditioning == "combination":
            return CombinationConditioner(domains, m.cond_dim)
        vocab_file = self.run.root / "vocab.json" if self.run is not None else None
        if vocab_file is not None and vocab_file.is_file():
            try:
                vocab = read_json(vocab_file)
            except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
                vocab = e
            if not isinstance(vocab, list) or not all(isinstance(w, str) for w in vocab):
                raise TrainingError(f"{vocab_file} is damaged ({str(vocab)[:80] if isinstance(vocab, Exception) else 'not a list of words'}): "
                                    "it is the caption vocabulary the run was trained with; restore it, or train the run again into a new --out")
        else:
            captions = [r["caption"] for s in split_names(self.root) for r in read_metadata(self.root, s)]
            if "train" not in split_names(self.root):  # streamed: the train split's captions, rendered nothing

                captions += [sample_record(self.spec, "train", i)[0]["caption"] for i in range(min(self.spec.split_sizes()["train"], 20_000))]
            vocab = build_vocab(captions)
        self.vocab = vocab
        t = m.text
        return CaptionConditioner(vocab, m.cond_dim, layers=t.layers, heads=t.heads, max_len=t.max_len, dropout=t.dropout)

    def keep_vocab(self, run: RunFolder) -> None:
        """Write the caption vocabulary to ``RUN/vocab.json`` (caption conditioning; call once the
        run folder is open), so that sampling the run later reads the words it was trained with."""
        if self.cfg.model.conditioning != "caption" or not run.root.is_dir() or (run.root / "vocab.json").is_file():
            return

        atomic_write(run.root / "vocab.json", json.dumps(self.vocab) + "\n")

    def encode(self, records: list[dict]) -> torch.Tensor:
        """Encoded conditions int64 ``[N, ...]`` of records (``concepts``, ``caption``)."""
        return self.conditioner.encode(records)

    # -- training -----------------------------------------------------------------------------------
    def loss(self, model, batch, generator):
        """Loss of one micro-batch (pixels ``image`` uint8, or ``latent`` float) with per-sample
        condition dropout: DDPM (MSE between the prediction and the noise or velocity at uniform
        timesteps, optionally Min-SNR weighted) or flow matching (:func:`flow_matching_loss`)."""
        x0 = batch["latent"] if "latent" in batch else to_float(batch["image"])
        b = x0.shape[0]
        dev = x0.device
        if self.cfg.model.schedule.flow_matching:
            drop = torch.rand(b, generator=generator, device=dev) < self.cfg.model.cond_dropout
            return flow_matching_loss(self.noise, self.cfg.model.flow_, model, x0, batch["cond"], drop, generator)
        noise = torch.randn(x0.shape, generator=generator, device=dev)
        t = torch.randint(0, self.noise.config.num_train_timesteps, (b,), generator=generator, device=dev)
        drop = torch.rand(b, generator=generator, device=dev) < self.cfg.model.cond_dropout
        xt = self.noise.add_noise(x0, noise, t)
        target = noise if self.noise.config.prediction_type == "epsilon" else self.noise.get_velocity(x0, noise, t)
        pred = model(xt, t, batch["cond"], drop)
        gamma = self.cfg.model.schedule.snr_gamma
        if gamma is None:
            return F.mse_loss(pred.float(), target)
        # Min-SNR-gamma (Hang et al. 2023): weight min(SNR, gamma) / SNR for epsilon, / (SNR + 1) for v
        from diffusers.training_utils import compute_snr

        snr = compute_snr(self.noise, t)
        w = snr.clamp(max=gamma) / (snr if self.noise.config.prediction_type == "epsilon" else snr + 1)
        per_sample = F.mse_loss(pred.float(), target, reduction="none").mean(dim=(1, 2, 3))
        return (per_sample * w).mean()

    def evaluator(self):
        if self._evaluator is None:
            self._evaluator = load_evaluator(self.spec, self.cfg.evaluation.evaluator, device=self._device, abstain=self.cfg.evaluation.abstain,
                                             position_bins=self.cfg.evaluation.position_bins)
        return self._evaluator

    def val_evaluator(self):
        """The evaluator of validation images: ``evaluation.val_evaluator`` (a learned evaluator,
        batched on the training device) when set, else :meth:`evaluator`."""
        which = self.cfg.evaluation.val_evaluator
        if which is None or str(which) == str(self.cfg.evaluation.evaluator):
            return self.evaluator()
        if getattr(self, "_val_evaluator", None) is None:
            self._val_evaluator = load_evaluator(self.spec, which, device=self._device, abstain=self.cfg.evaluation.abstain,
                                                 position_bins=self.cfg.evaluation.position_bins)
        return self._val_evaluator

    def validate(self, model, accelerator) -> dict[str, float]:
        """``val/loss`` (fixed noise and evenly spaced timesteps over up to 256 val images) and,
        with the evaluator, ``val/joint_accuracy`` and ``val/acc/<concept>`` of images generated
        for the first ``evaluation.val_samples`` val records (seen combinations only)."""
        from accelerate.utils import gather_object

        if not self.val_records:
            return {}
        dev = accelerator.device
        self._device = str(dev)
        out = {}
        if self._val_images is None:
            ds = MosaicDataset(self.root, "val")
            n = min(256, len(ds))
            data = self._latents("val", ds.images[:n]) if self.space is not None else ds.images[:n]
            self._val_images = (data, self.encode(ds.records[:n]))
        imgs, cond = self._val_images
        g = torch.Generator().manual_seed(1234)
        total, count = 0.0, 0
        T = self.noise.config.num_train_timesteps
        for s in range(0, len(imgs), 64):
            x0 = (imgs[s:s + 64] if self.space is not None else to_float(imgs[s:s + 64])).to(dev)
            b = len(x0)
            noise = torch.randn(x0.shape, generator=g).to(dev)
            if self.cfg.model.schedule.flow_matching:  # evenly spaced u, fixed noise: the same loss at every validation
                u = ((torch.arange(s, s + b) + 0.5) / max(len(imgs), 1)).to(dev)
                total += flow_matching_loss(self.noise, self.cfg.model.flow_, model, x0, cond[s:s + 64].to(dev), None, None,
                                            u=u, noise=noise).item() * b
                count += b
                continue
            t = (torch.arange(s, s + b) * T // max(len(imgs), 1)).clamp(max=T - 1).to(dev)
            xt = self.noise.add_noise(x0, noise, t)
            target = noise if self.noise.config.prediction_type == "epsilon" else self.noise.get_velocity(x0, noise, t)
            pred = model(xt, t, cond[s:s + 64].to(dev))
            total += F.mse_loss(pred.float(), target, reduction="sum").item() / x0[0].numel()
            count += b
        out["val/loss"] = total / count
        ev = self.cfg.evaluation
        if ev.enabled and ev.val_samples:
            recs = self.val_records[: ev.val_samples]
            seeds = sample_seeds(self.cfg.sampling.seed, "val", len(recs))
            with accelerator.split_between_processes(list(range(len(recs)))) as mine:
                images = generate(model, self.noise.config, self.encode([recs[i] for i in mine]), [seeds[i] for i in mine],
                                  image_size=self.image_size, guidance=self.cfg.sampling.guidance, steps=ev.val_steps,
                                  sampler=self.cfg.sampling.sampler, batch_size=self.cfg.sampling.batch_size, device=dev,
                                  autocast=accelerator.mixed_precision, space=self.space)
                preds = self.val_evaluator().predict(images) if len(images) else []
                mine_preds = list(zip(mine, preds))
            got = dict(gather_object(mine_preds)) if accelerator.num_processes > 1 else dict(mine_preds)
            preds = [got[i] for i in range(len(recs))]
            ok = {c: [p.get(c) == r["concepts"].get(c) for p, r in zip(preds, recs)] for c in self.concepts}
            for c in self.concepts:
                out[f"val/acc/{c}"] = float(np.mean(ok[c]))
            out["val/joint_accuracy"] = float(np.mean([all(ok[c][i] for c in self.concepts) for i in range(len(recs))]))
        return out

    def weights_meaning(self) -> dict:
        """The ``model`` section as JSON, less where the autoencoder lies and how it is trained or
        checked (``latent.path``, ``latent.root``, the autoencoder's device, checkpoint_every, check_n,
        threshold, evaluator: a moved or re-checked autoencoder means the same)."""
        m = self.cfg.model.model_dump(mode="json")
        if isinstance(m.get("latent"), dict):
            for k in ("path", "root"):
                m["latent"].pop(k, None)
            for k in ("device", "checkpoint_every", "check_n", "threshold", "evaluator"):
                m["latent"].get("autoencoder", {}).pop(k, None)
        return m

    def export(self, model, out_dir: Path) -> None:
        """``out_dir/backbone`` (diffusers ``save_pretrained``) and ``out_dir/conditioner.safetensors``."""
        from safetensors.torch import save_file

        out_dir.mkdir(parents=True, exist_ok=True)
        model.backbone.save_pretrained(out_dir / "backbone")
        save_file({k: v.detach().cpu().contiguous() for k, v in model.conditioner.state_dict().items()}, str(out_dir / "conditioner.safetensors"))

    def _check_weight_shapes(self, run: RunFolder) -> None:
        """The backbone the run's ``config.yaml`` describes, built on the meta device (no memory), must
        have the tensors of the run's exported backbone weights (``best/`` or ``final/``, read from the
        safetensors header): a config edited to a huge model must not make ``mosaic sample`` allocate it
        (15 GB and a traceback, attack round 17) before the weights are compared.

        Raises:
            TrainingError: shapes that differ (the first named), or a header safetensors cannot read."""
        files = [d / "backbone" / "diffusion_pytorch_model.safetensors" for d in (run.best, run.final)]
        path = next((f for f in files if f.is_file()), None)
        if path is None:  # no weights yet: load_weights names what is missing
            return
        with torch.device("meta"):
            want = {k: tuple(v.shape) for k, v in build_backbone(self.cfg.model, self.model_size, self.model_channels).state_dict().items()}
        try:
            got, k = shape_difference(path, want)
        except Exception as e:  # noqa: BLE001 - a header safetensors cannot read: the file is damaged
            raise TrainingError(f"{path} does not load ({type(e).__name__}): the run's weights are damaged; train the run "
                                "again into a new --out") from None
        if k is not None:
            raise TrainingError([("model", f"{run.config} does not describe the run's weights {path}: tensor {k!r} is "
                                  f"{got.get(k, 'absent')} there and {want.get(k, 'absent')} by the config; the config was edited "
                                  "or the weights come from another run: restore config.yaml, or train the run again into a new --out")])

    def load_weights(self, weights_dir: Path) -> None:
        """Load weights written by :meth:`export` into ``self.model``.

        Raises:
            TrainingError: the folder is missing, a file is damaged (truncated, not safetensors), or it
                holds other shapes.
        """
        bb = weights_dir / "backbone" / "diffusion_pytorch_model.safetensors"
        cf = weights_dir / "conditioner.safetensors"
        if not bb.is_file() or not cf.is_file():
            raise TrainingError(f"no exported weights in {weights_dir} (expected backbone/ and conditioner.safetensors)")
        rec = read_weights_record(weights_dir)  # one record for both files: a best/ replaced between them is named
        config = self.run.config if self.run is not None else Path(weights_dir).parent / "config.yaml"
        check_weights_meaning(rec, self.weights_meaning(), config, weights_dir)
        load_weights_file(self.model.backbone, bb, weights_dir, rec)
        load_weights_file(self.model.conditioner, cf, weights_dir, rec)


def _process_state():
    """``(accelerate.PartialState or None, main_process_first context)``: the AcceleratorState the
    run driver made, when there is one."""
    import contextlib

    try:
        from accelerate.state import PartialState

        if PartialState._shared_state:
            st = PartialState()
            return st, st.main_process_first()
    except ImportError:
        pass
    return None, contextlib.nullcontext()


def _say_main(state):
    return print if state is None or state.is_main_process else (lambda s: None)
