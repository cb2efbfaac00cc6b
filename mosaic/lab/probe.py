"""What estimating a run needs of its config, without a dataset on disk: the model the run would build,
its task's own loss, and batches like the loop's (:class:`Probe`).

The spec (with its overrides) is validated and a few of its records are sampled in memory; nothing
is written. Used by :mod:`mosaic.lab.cost` and ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from mosaic.dataset import dataset_out_check, read_manifest, read_metadata, sample_record, spec_of
from mosaic.errors import ConfigError, MosaicError
from mosaic.lab.autoencoder import LatentSpace, build_autoencoder
from mosaic.layout_check import check_layouts
from mosaic.lab.data import dataset_dir_for, load_dataset_spec, resolve_dataset
from mosaic.lab.diffusion import DiffusionModel, DiffusionTask, build_backbone, check_model_fits, generate
from mosaic.lab.diffusion.conditioning import (
    CaptionConditioner, CombinationConditioner, FactorizedConditioner, OneHotConditioner, build_vocab,
)
from mosaic.lab.diffusion.task import make_noise_scheduler
from mosaic.lab.transformer import BindingTask, ClassifierModel, ClassifierTask, DualEncoder, make_encoder
from mosaic.lab.transformer.binding import swap_negatives
from mosaic.lab.transformer.tokens import SceneTokenizer, fact_table, object_table, tokens_from_table


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


def spec_and_records(section, k: int):
    """``(spec, records of the train split (up to k), train size, dataset exists)`` without writing."""
    if section.path is not None:
        root = resolve_dataset(section, generate=False)  # raises DatasetError for a missing/incomplete dataset
        spec = spec_of(root)
        split = "train" if spec.split_sizes().get("train") else next(iter(spec.split_sizes()))
        return spec, read_metadata(root, split)[:k], spec.split_sizes().get("train", 0), True
    spec = load_dataset_spec(section)
    sizes = spec.split_sizes()
    split = "train" if sizes.get("train") else next((s for s, n in sizes.items() if n), "train")
    root = Path(section.root) / dataset_dir_for(spec)
    dataset_out_check(root, "dataset.root")  # a dry run names a dataset.root inside a dataset, as the run would (before writing)
    exists = False
    if (root / "manifest.json").is_file():
        try:
            exists = read_manifest(root).get("status") == "complete"
        except (MosaicError, ValueError, OSError):
            exists = False
    if not exists:  # a layout that fails only sometimes stops generation; say so now, not mid-run
        check_layouts(spec)
    recs = [sample_record(spec, split, i)[0] for i in range(min(k, max(sizes.get(split, 0), 1)))]
    return spec, recs, sizes.get("train", 0), exists


def _cycle(records: list[dict], b: int) -> list[dict]:
    return [records[i % len(records)] for i in range(b)]


def diffusion_probe(cfg, spec, records: list[dict], n_train: int) -> Probe:
    """The model, loss (``DiffusionTask.loss``) and batches of a diffusion config; for latent
    diffusion the backbone on latents and an untrained autoencoder of the configured shape as the
    space the sampler decodes through (its cost does not depend on its weights)."""
    m = cfg.model
    size = spec.image.size
    space = None
    if m.latent is not None:
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
    spec, records, n_train, exists = resolved or spec_and_records(cfg.dataset, k)
    if not records:
        raise ConfigError([("dataset", "the spec has no samples in any split: nothing to train on")])
    if hasattr(cfg, "objective"):
        return transformer_probe(cfg, spec, records, n_train), exists
    return diffusion_probe(cfg, spec, records, n_train), exists
