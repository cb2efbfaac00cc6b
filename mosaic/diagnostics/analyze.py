"""Run the diagnostics on a lab run: at the end of training (a config's ``analysis:`` section) or
on a finished run folder (``mosaic analyze RUN``).

Which diagnostic applies where (diagnostics.md §7):

=====================  ==========================================  ===========================
diagnostic             transformer run (classifier / binding)      diffusion run (UNet / DiT)
=====================  ==========================================  ===========================
probes                 the run's embedding (classifier: the        the last block's pooled
                       heads' input; binding: the normalised       features (UNet mid block)
                       scene embedding)
layers                 every encoder block, pooled, then the       every down block and the
                       output (and the binding projection)         mid block (DiT: every block)
factorization          the embedding, test splits together         the last block
rank                   ordinal concepts only (count, size,         same
                       position)
binding-complexity     the embedding; 2-object datasets with a     same (last block)
interventions          colour and a shape concept per object
diffusion-classifier   — (not a generative model)                  the model itself
=====================  ==========================================  ===========================

:mod:`mosaic.diagnostics.applies` decides which diagnostics apply to a run. This module works on
a built task (the families call it at the end of training);
:mod:`mosaic.diagnostics.runs` opens a finished run folder for ``mosaic analyze``.

Protocol: probes and axes train on a seeded subset of the **train** split (seen combinations
only; :class:`~mosaic.diagnostics.errors.LeakageError` otherwise) and are scored on ``test_id``
(seen) and ``test_ood`` (held-out). Diffusion features are read at ``feature_timestep`` under the
null condition. The result is the ``analysis`` entry of ``metrics.json``; :func:`analysis_columns`
flattens it into sweep columns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from mosaic.diagnostics import diffusion_classifier as dc
from mosaic.diagnostics.config import AnalysisSection
from mosaic.diagnostics.errors import NotApplicableError
from mosaic import plots
from mosaic.diagnostics.applies import binding_slots, resolve_what
from mosaic.diagnostics.binding_complexity import ComplexityConfig, binding_complexity
from mosaic.diagnostics.factorization import factorization, heldout_r2
from mosaic.diagnostics.features import transformer_block_features, unet_block_features
from mosaic.diagnostics.interventions import interventions
from mosaic.diagnostics.probes import (
    ProbeConfig, binding_probe_report, concept_probes, fit_linear_probes, layer_curve, slot_probe_report,
)
from mosaic.diagnostics.rank import rank_axes, require_ordinal
from mosaic.diagnostics.set_probes import fit_set_probes, set_probe_report
from mosaic.errors import MosaicError
from mosaic.io import own_folders
from mosaic.lab.data import evaluation_splits, to_float
from mosaic.torch_data import MosaicDataset

SEEN, HELD = "test_id", "test_ood"


# ----------------------------------------------------------------------------------------------
# features
# ----------------------------------------------------------------------------------------------


@dataclass
class Features:
    """Per-layer features and labels of the analysed splits.

    Attributes:
        layers: layer name (depth order) -> split -> float32 ``[N, D]``.
        embedding: the layer the probes, factorization and rank axes use.
        labels: split -> int64 ``[N, C]`` value index per spec concept (-1: none).
        held: split -> bool ``[N]`` the sample's combination is held out.
        objects: split -> int64 ``[N, M, A]`` object tuples, or None (no tokenizer).
        attributes: the object attributes of ``objects`` (e.g. ``["color", "shape"]``).
        concepts: C concept names; n_values: values per concept.
    """

    layers: dict
    embedding: str
    labels: dict
    held: dict
    objects: dict | None
    attributes: list[str]
    concepts: list[str]
    n_values: list[int]


def _subset(n: int, cap: int | None, seed: int) -> np.ndarray:
    if cap is None or n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))


def _splits(root: Path) -> list[str]:
    return ["train"] + [s for s in evaluation_splits(root) if s != "train"]


def transformer_features(task, opts: AnalysisSection, device) -> Features:
    """Features of a transformer task's model on train (subset) and the test splits."""
    import torch.nn.functional as F

    from mosaic.lab.transformer.data import SplitData  # the package mosaic.lab.transformer imports this module

    cfg, spec = task.cfg, task.spec
    model = task.model.to(device).eval()
    binding = cfg.objective == "binding"
    enc = model.scene_encoder if binding else model.encoder
    extra = {"embedding": lambda y: F.normalize(model.scene_proj(y).float(), dim=-1)} if binding else None
    layers: dict = {}
    labels, held, objects = {}, {}, {}
    for split in _splits(task.root):
        data = task.train if split == "train" else SplitData(task.root, split, spec, cfg.input.kind, task.tokenizer)
        if not len(data):
            continue
        idx = _subset(len(data), opts.probes.max_train if split == "train" else None, opts.probes.seed)
        feats = transformer_block_features(enc, data.inputs[torch.from_numpy(idx)], pool=opts.pool, device=device,
                                           batch_size=cfg.evaluation.batch_size, extra=extra)
        for name, f in feats.items():
            layers.setdefault(name, {})[split] = f
        labels[split] = data.targets.numpy()[idx]
        held[split] = np.array([bool(data.records[i].get("held_out")) for i in idx])
        if data.objects is not None:
            objects[split] = data.objects.numpy()[idx]
    concepts = list(spec.concepts)
    return Features(layers, "embedding" if binding else "output", labels, held, objects or None,
                    list(task.tokenizer.attributes) if task.tokenizer is not None else [], concepts,
                    [len(spec.domain(c)) for c in concepts])


def diffusion_features(task, opts: AnalysisSection, device) -> Features:
    """Pooled block features of a diffusion task's model (null condition, fixed timestep)."""

    model = task.model.to(device).eval()
    layers: dict = {}
    labels, held = {}, {}
    null = None
    for split in _splits(task.root):
        ds = MosaicDataset(task.root, split)
        if not len(ds):
            continue
        idx = _subset(len(ds), opts.probes.max_train if split == "train" else None, opts.probes.seed)
        if null is None:
            null = task.encode(ds.records[:1])
        feats = unet_block_features(model, to_float(ds.images[torch.from_numpy(idx)]), null, scheduler=task.noise,
                                    t=min(opts.feature_timestep, task.noise.config.num_train_timesteps - 1), device=device)
        for name, f in feats.items():
            layers.setdefault(name, {})[split] = f
        labels[split] = ds.targets.numpy()[idx]
        held[split] = np.array([bool(ds.records[i].get("held_out")) for i in idx])
    concepts = list(task.spec.concepts)
    return Features(layers, list(layers)[-1], labels, held, None, [], concepts, [len(task.spec.domain(c)) for c in concepts])


# ----------------------------------------------------------------------------------------------
# the diagnostics on features
# ----------------------------------------------------------------------------------------------


def _probe_config(opts: AnalysisSection, device):
    p = opts.probes
    return ProbeConfig(epochs=p.epochs, batch_size=p.batch_size, lr=p.lr, val_fraction=p.val_fraction, seed=p.seed, device=str(device))


def _evals(f: Features, layer: str) -> dict:
    return {s: (f.layers[layer][s], f.labels[s]) for s in (SEEN, HELD, "test") if s in f.layers[layer]}


def run_probes(f: Features, opts: AnalysisSection, device) -> tuple[dict, list]:
    """Concept probes on the embedding and, with object tuples, slot-wise binding probes, keyed
    probes (colour given shape when both are attributes, else the second attribute given the
    first) and, with several objects per scene, the order-free set probes
    (:mod:`mosaic.diagnostics.set_probes`)."""

    cfg = _probe_config(opts, device)
    x = f.layers[f.embedding]
    rep, probes = concept_probes((x["train"], f.labels["train"], f.held["train"]), _evals(f, f.embedding), f.concepts,
                                 f.n_values, cfg)
    out = {"layer": f.embedding, "concept": rep}
    if f.objects and len(f.attributes) >= 2:
        a = f.attributes
        n_vals = [int(max(o[:, :, i].max() for o in f.objects.values())) + 1 for i in range(len(a))]
        train = (x["train"], f.objects["train"], f.held["train"])
        evals = {s: (x[s], f.objects[s]) for s in (SEEN, HELD, "test") if s in x and s in f.objects}
        out["slots"] = slot_probe_report(train, evals, n_vals, a, cfg)
        # keyed (colour given shape): a held-out combination's colour never occurs as that shape's
        # training target, so the keyed probe is scored on seen combinations only
        key, tgt = (a.index("shape"), a.index("color")) if {"shape", "color"} <= set(a) else (0, 1)
        out["binding"] = binding_probe_report(train, {s: v for s, v in evals.items() if s != HELD}, key, tgt, n_vals[key],
                                              n_vals[tgt], cfg, names=(a[key], a[tgt]))
        if f.objects["train"].shape[1] >= 2:  # order-free set probes (binding paper §2.1): multi-object scenes

            out["set"] = set_probe_report(train, evals, n_vals, a, cfg, max_train=opts.probes.max_train)
    return out, probes.weights


def run_layers(f: Features, opts: AnalysisSection, device) -> dict:
    labels = {s: f.labels[s] for s in f.labels}
    return layer_curve(f.layers, labels, f.concepts, held_out_train=f.held["train"], config=_probe_config(opts, device),
                       n_values=f.n_values, seen=SEEN if SEEN in labels else "test", held=HELD)


def run_factorization(f: Features, weights: list | None) -> dict:
    """In-sample over the test splits (faithful to the reference; probe-span R² with the concept
    probes' weights) and out-of-sample: least-squares factors on train, R² on held-out cells."""

    x = f.layers[f.embedding]
    tests = [s for s in (SEEN, HELD, "test") if s in x]
    xt = np.concatenate([x[s] for s in tests])
    yt = np.concatenate([f.labels[s] for s in tests])
    out = factorization(xt, yt, f.concepts, n_values=f.n_values, probe_weights=weights)
    out["embedding"] = f"{f.embedding} ({', '.join(tests)} together)"
    if HELD in x:
        out["heldout"] = heldout_r2(x["train"], f.labels["train"], x[HELD], f.labels[HELD])
    return out


def run_rank(f: Features, spec) -> dict:
    x = f.layers[f.embedding]
    out = {}
    for c, ranks in require_ordinal(spec).items():
        h = f.concepts.index(c)
        table = np.asarray(ranks, dtype=float)

        def order(y):
            return np.where(y[:, h] >= 0, table[np.clip(y[:, h], 0, None)], np.nan)

        evals = {s: (x[s], order(f.labels[s])) for s in (SEEN, HELD, "test") if s in x}
        out[c] = rank_axes((x["train"], order(f.labels["train"]), f.held["train"]), evals, concept=c)
    return out


@dataclass
class BindingScenes:
    """The 2-object scenes of the analysed splits for the binding diagnostics.

    Attributes:
        x: split -> float32 ``[N, D]`` the run's embedding.
        labels: split -> int64 ``[N, 4]`` ``(colour₀, shape₀, colour₁, shape₁)`` value indices in
            each concept's own domain; n_values: their value counts.
        objects: split -> int64 ``[N, 2, 2]`` ``(colour, shape)`` per object in one colour and
            one shape vocabulary shared by both objects.
        held: split -> bool ``[N]``; dropped: split -> scenes left out (a missing label).
        concepts: the four concept names.
    """

    x: dict
    labels: dict
    objects: dict
    held: dict
    dropped: dict
    n_values: list[int]
    concepts: list[str]
    remap: list = None
    n_colors: int = 0
    n_shapes: int = 0

    def objects_of(self, labels: np.ndarray) -> np.ndarray:
        """int64 ``[N, 2, 2]`` shared-vocabulary objects of ``[N, 4]`` slot labels."""
        return np.stack([self.remap[j][labels[:, j]] for j in range(4)], 1).reshape(-1, 2, 2)


def binding_scenes(f: Features, spec) -> BindingScenes:
    """Select the slot concepts of :func:`binding_slots` from a run's features.

    Raises:
        NotApplicableError: the dataset is not a 2-object colour/shape dataset.
    """

    slots, why = binding_slots(spec)
    if slots is None:
        raise NotApplicableError("binding-complexity", why)
    concepts = [c for sl in slots for c in sl]
    cols = [f.concepts.index(c) for c in concepts]
    vocab = {}
    for role, k in (("color", 0), ("shape", 1)):
        vals: list = []
        for sl in slots:
            vals += [v for v in spec.domain(sl[k]) if v not in vals]
        vocab[role] = vals
    # value index in a concept's domain -> index in the shared vocabulary
    remap = [np.array([vocab["color" if j % 2 == 0 else "shape"].index(v) for v in spec.domain(c)]) for j, c in enumerate(concepts)]
    out = BindingScenes({}, {}, {}, {}, {}, [len(spec.domain(c)) for c in concepts], concepts, remap,
                        len(vocab["color"]), len(vocab["shape"]))
    x = f.layers[f.embedding]
    for split, lab in f.labels.items():
        y = lab[:, cols]
        ok = (y >= 0).all(1)
        y = y[ok]
        out.x[split], out.labels[split], out.held[split] = x[split][ok], y, f.held[split][ok]
        out.objects[split] = out.objects_of(y)
        out.dropped[split] = int((~ok).sum())
    return out


def binding_max_train(opts: AnalysisSection, todo: list[str]) -> int | None:
    """The train-split cap the binding diagnostics' features need (None: all)."""
    caps = [opts.binding_complexity.max_train if d == "binding-complexity" else opts.interventions.max_train
            for d in todo if d in ("binding-complexity", "interventions")]
    return None if any(c is None for c in caps) else max(caps)


def run_binding_complexity(b: BindingScenes, opts: AnalysisSection, device) -> dict:
    """Fit the approximator families on train scenes (seen types; a seeded subset of
    ``max_train``), R² and the concept probes on the predicted embeddings of ``test_id`` (seen
    types) and ``test_ood`` (held-out types); the final epoch is reported."""

    o = opts.binding_complexity
    idx = _subset(len(b.labels["train"]), o.max_train, o.seed)
    train = (b.labels["train"][idx], b.x["train"][idx], b.held["train"][idx])
    evals = {s: (b.labels[s], b.x[s]) for s in (SEEN, HELD, "test") if s in b.labels and len(b.labels[s])}
    score = None
    if o.probes:
        pidx = idx[_subset(len(idx), opts.probes.max_train, opts.probes.seed)]
        probes = fit_set_probes(b.x["train"][pidx], b.objects["train"][pidx], [b.n_colors, b.n_shapes], ["color", "shape"],
                                held_out=b.held["train"][pidx], config=_probe_config(opts, device))

        def score(pred, lab):
            r = probes.score(pred, b.objects_of(lab))
            return {"probe_concept": r["concept_mean"], "probe_object": None if r["n_untrained"] else r["object"]}

    cfg = ComplexityConfig(families=tuple(o.families), hidden=tuple(o.hidden), epochs=o.epochs, lr=o.lr, seed=o.seed,
                           device=str(device))
    out = binding_complexity(train, evals, b.n_values, cfg, probe_score=score)
    out.update({"slots": b.concepts, "hidden": list(o.hidden), "lr": o.lr, "selection": "final epoch",
                "probes": "set probes trained on the train split (colour, shape, object type; min positive > max negative "
                          "logit); probe_object is None where a scene holds a type no probe class was trained on"
                if o.probes else None})
    return out


def run_interventions(b: BindingScenes, opts: AnalysisSection, device) -> dict:
    """Bank from the train scenes, edits of ``test_id`` (seen) and ``test_ood`` (held-out) bases,
    retrieval over the gallery (train + test splits, or the test splits)."""

    o = opts.interventions
    idx = _subset(len(b.labels["train"]), o.max_train, o.seed)
    tests = [s for s in (SEEN, HELD, "test") if s in b.x and len(b.x[s])]
    bases = {}
    for s in tests:
        j = _subset(len(b.x[s]), o.max_bases, o.seed)
        bases[s] = (b.x[s][j], b.objects[s][j])
    parts = (["train"] if o.gallery == "all" else []) + tests
    pick = {s: (idx if s == "train" else slice(None)) for s in parts}
    gallery = (np.concatenate([b.x[s][pick[s]] for s in parts]), np.concatenate([b.objects[s][pick[s]] for s in parts]))
    out = interventions((b.x["train"][idx], b.objects["train"][idx], b.held["train"][idx]), bases, gallery,
                        strength=o.strength, seed=o.seed, device=str(device), positional=o.bank == "positions", targets=o.targets)
    out["gallery_splits"] = parts
    out["hit_rule"] = ("hit: any gallery scene labelled with the edited pair in its order (reference: only the first-indexed "
                       "one, hit_first_indexed); hit_unordered: in either order")
    return out


def run_diffusion_classifier(task, opts: AnalysisSection, device, generation: dict | None = None, say=print) -> dict:
    """Classify real test images (``images_per_split`` per split) over every combination of the
    concepts' values; report seen vs held-out next to the run's generation accuracy."""

    o = opts.diffusion_classifier
    spec = task.spec
    names = list(spec.concepts)
    grid = dc.combination_grid([len(spec.domain(c)) for c in names], limit=o.max_candidates)
    kind = getattr(task.conditioner, "kind", "factorized")
    candidates = torch.from_numpy(grid) if kind == "factorized" else torch.arange(len(grid))[:, None]
    images, truth, held = [], [], []
    held_cells = set()
    for split in [s for s in _splits(task.root) if s != "train"]:
        ds = MosaicDataset(task.root, split)
        if not len(ds):
            continue
        y = ds.targets.numpy()
        ok = (y >= 0).all(1)
        if split == HELD:
            held_cells |= {tuple(r) for r in y[ok]}
        idx = np.nonzero(ok)[0]
        if o.images_per_split is not None and len(idx) > o.images_per_split:
            idx = idx[np.linspace(0, len(idx) - 1, o.images_per_split).round().astype(int)]
        images.append(to_float(ds.images[torch.from_numpy(idx)]))
        truth.append(y[idx])
        held.append(np.array([bool(ds.records[i].get("held_out")) for i in idx]))
    x0, truth, held = torch.cat(images), np.concatenate(truth), np.concatenate(held)
    T = task.noise.config.num_train_timesteps
    ts = dc.timesteps(o.timesteps, o.n_timesteps, T)
    w = dc.timestep_weights(o.weighting, ts, task.noise.alphas_cumprod)
    model = task.model.to(device).eval()
    fn = dc.model_denoise_error(model, task.noise, norm=o.norm, target=o.target)
    say(f"diffusion classifier: {len(x0)} images x {len(grid)} candidates x {len(ts)} timesteps x {o.n_trials} trial(s)")
    res = dc.classify(fn, x0, candidates, ts, weights=w, n_trials=o.n_trials, seed=o.seed, batch_size=o.batch_size,
                      stages=o.stages, device=device)
    pred = grid[res.pred]
    per_concept = dc.per_concept_predictions(res.errors, grid, mode=o.per_concept if not o.stages else "min")
    picked_held = np.array([tuple(p) in held_cells for p in pred])
    rep = dc.classification_report(pred, truth, held, names, candidate_held_out=picked_held, per_concept=per_concept)
    out = {**rep, "candidates": int(len(grid)), "timesteps": ts.tolist(), "weighting": o.weighting, "norm": o.norm,
           "target": o.target, "n_trials": o.n_trials, "stages": o.stages, "evaluations": res.evaluations,
           "seconds": res.seconds, "images_per_s": res.images_per_second}
    if generation:
        out["generation"] = {g: {"joint": generation[g].get("joint"), "n": generation[g].get("n")} for g in ("seen", "held_out")
                             if isinstance(generation.get(g), dict)}
    return out


# ----------------------------------------------------------------------------------------------
# drivers
# ----------------------------------------------------------------------------------------------


def analyze_task(family: str, task, opts: AnalysisSection, *, what: list[str] | None = None, device="cpu",
                 metrics: dict | None = None, out_dir: Path | None = None, say: Callable[[str], None] = print) -> dict:
    """Run the diagnostics on a task whose model holds the weights to analyse.

    Args:
        family: ``transformer`` or ``diffusion``.
        task: the family's task (its model already loaded with the weights).
        opts: the ``analysis:`` options; ``what`` overrides ``opts.what``.
        metrics: the run's metrics so far (the task accuracy table, for comparisons and figures).
        out_dir: where figures go (``RUN/analysis``); None: no figures.
    Returns:
        The ``analysis`` entry of metrics.json: ``what``, ``skipped`` (name -> why), ``seconds``
        (per diagnostic, including feature extraction), and one entry per diagnostic run
        (``probes``, ``layers``, ``factorization``, ``rank``, ``binding_complexity``,
        ``interventions``, ``diffusion_classifier``), ``figures``.
    Raises:
        NotApplicableError: a requested diagnostic that does not apply; LeakageError, DiagnosticError.
    """
    conditioning = getattr(task.cfg.model, "conditioning", None) if family == "diffusion" else None
    todo, skipped = resolve_what(what if what is not None else opts.what, family, task.spec, conditioning)
    out: dict = {"what": todo, "skipped": skipped, "seconds": {}}
    metrics = metrics or {}
    feats = None
    if any(d in todo for d in ("probes", "layers", "factorization", "rank")):
        t0 = time.perf_counter()
        with torch.no_grad():
            feats = (transformer_features if family == "transformer" else diffusion_features)(task, opts, device)
        out["seconds"]["features"] = time.perf_counter() - t0
        out["embedding"] = feats.embedding
        say(f"analysis: features of {len(feats.layers)} layers in {out['seconds']['features']:.1f} s")
    bscenes = None
    if any(d in todo for d in ("binding-complexity", "interventions")):
        t0 = time.perf_counter()
        cap = binding_max_train(opts, todo)
        bf = feats
        if bf is None or cap != opts.probes.max_train:
            sub = opts.model_copy(update={"probes": opts.probes.model_copy(update={"max_train": cap})})
            with torch.no_grad():
                bf = (transformer_features if family == "transformer" else diffusion_features)(task, sub, device)
            out["embedding"] = bf.embedding
        bscenes = binding_scenes(bf, task.spec)
        out["seconds"]["binding_features"] = time.perf_counter() - t0
        say(f"analysis: binding scenes ({', '.join(f'{s} {len(v)}' for s, v in bscenes.x.items())}) "
            f"in {out['seconds']['binding_features']:.1f} s")
    weights = None
    for d in todo:
        t0 = time.perf_counter()
        if d == "probes":
            out["probes"], weights = run_probes(feats, opts, device)
        elif d == "layers":
            out["layers"] = run_layers(feats, opts, device)
        elif d == "factorization":
            if weights is None:  # probe-span R² needs concept probes: train them (counted in this diagnostic's seconds)

                x = feats.layers[feats.embedding]
                weights = fit_linear_probes(x["train"], feats.labels["train"], feats.n_values, held_out=feats.held["train"],
                                            config=_probe_config(opts, device), what="concept probes").weights
            out["factorization"] = run_factorization(feats, weights)
        elif d == "rank":
            out["rank"] = run_rank(feats, task.spec)
        elif d == "binding-complexity":
            out["binding_complexity"] = run_binding_complexity(bscenes, opts, device)
        elif d == "interventions":
            out["interventions"] = run_interventions(bscenes, opts, device)
        else:
            out["diffusion_classifier"] = run_diffusion_classifier(task, opts, device, metrics.get("table"), say)
        out["seconds"][d] = time.perf_counter() - t0
        say(f"analysis: {d} in {out['seconds'][d]:.1f} s")
    if out_dir is not None and opts.figures:
        out["figures"] = [str(p) for p in draw(out, metrics, Path(out_dir))]
    return out


def draw(analysis: dict, metrics: dict, out_dir: Path) -> list[Path]:
    """The analysis figures (:mod:`mosaic.plots`): per-layer curve, rank-axis scatter per ordinal
    concept, probe vs task accuracy, generative vs discriminative accuracy. A link at ``out_dir``
    (``RUN/analysis``) is removed, never followed: the figures are written into the run."""

    own_folders(out_dir.parent, [out_dir.name])
    paths = []
    if "layers" in analysis:
        paths.append(plots.plot_layer_curve(analysis["layers"], out_dir / "layers.png"))
    for c, r in (analysis.get("rank") or {}).items():
        paths.append(plots.plot_rank_scatter(r, out_dir / f"rank_{c}.png"))
    if "probes" in analysis and metrics.get("table"):
        paths.append(plots.plot_probe_vs_task(analysis["probes"], metrics["table"], out_dir / "probes_vs_task.png"))
    if "binding_complexity" in analysis:
        paths.append(plots.plot_binding_complexity(analysis["binding_complexity"], out_dir / "binding_complexity.png"))
    if "diffusion_classifier" in analysis and (analysis["diffusion_classifier"].get("generation")):
        paths.append(plots.plot_generative_vs_discriminative(analysis["diffusion_classifier"], out_dir / "generative_vs_discriminative.png"))
    return [p for p in paths if p is not None]


def analyze_after_training(family: str, cfg, task, run_root: Path, device, metrics: dict, say: Callable[[str], None] = print) -> dict:
    """The end-of-training analysis of a config with an ``analysis:`` section (main process, the
    task's model holding the evaluated weights). A diagnostic that fails records ``error`` in the
    result instead of losing the trained run's metrics."""

    try:
        out = analyze_task(family, task, cfg.analysis, device=device, metrics=metrics, out_dir=Path(run_root) / "analysis", say=say)
    except MosaicError as e:
        say(f"analysis failed: {e}")
        return {"error": str(e)}
    out["checkpoint"] = metrics.get("checkpoint") or (metrics.get("samples") or {}).get("checkpoint")
    return _jsonable(out)


def _jsonable(x):
    import math

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x

