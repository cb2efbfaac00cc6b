"""Interventions on scene embeddings: replace one object's colour by arithmetic on mean object
embeddings, and check that the edited embedding retrieves a scene of the edited pair.

Source: Uselis, Koishigarina & Oh (2026), "How can embedding models bind concepts?", code
``oshapio/binding-concepts-complexity``, ``src/mob/clip_embeddings/run_interventions.py``
(``_build_object_embedding_bank`` in mode ``avg_scene_position_independent``,
``run_interventions``); definitions restated in ``shared/reference/diagnostics.md`` §2.3:

- **bank**: ``u(a, o)`` = the mean scene embedding over scenes holding the object (colour a,
  shape o) in either slot (a scene holding it twice counts twice, as in the reference; its mode
  ``avg_scene_position_independent``, the default). ``positional=True`` is the reference's
  ``avg_scene_position_dependent``: ``u(a, o, slot)`` over scenes holding it in that slot, the
  left edit using the left-slot entries and the right edit the right-slot ones;
- **edit**: for a base scene ``(a₁ o₁, a₂ o₂)`` with ``o₁ ≠ o₂`` one target colour
  ``t ∉ {a₁, a₂}`` is drawn (seeded; reference seed 42, one target per base); the left edit is
  ``z̃ = z − k·(u(a₁, o₁) − u(t, o₁))`` (control scene ``(t o₁, a₂ o₂)``), the right edit likewise
  ``z − k·(u(a₂, o₂) − u(t, o₂))`` (control ``(a₁ o₁, t o₂)``), ``k = 1``; a base is skipped
  when any of ``u(a₁,o₁), u(a₂,o₂), u(t,o₁), u(t,o₂)`` is missing from the bank, or when either
  control pair has no scene in the gallery (the reference's two skip counters);
- **retrieval hit**: the cosine top-1 of ``z̃`` over the gallery is a scene of the control pair
  in its order (left, right); rates overall and split by same-colour (``a₁ = a₂``) and
  different-colour bases. ``hit_unordered`` also counts the control's two objects in the other
  order: a code that does not encode which object is left (a sum over objects) cannot tell the
  two apart, so its ordered rate is about one half even when every edit is exact.

Deviations (stated, deliberate):

- mosaic renders each pair of objects many times, so a hit is **any** gallery scene labelled with
  the control pair. The reference counts only the *first-indexed* scene of that pair (other renders
  of the same pair are misses), an artefact of its data holding one scene per pair; that rate is
  reported too (``hit_first_indexed``) for comparison.
- the bank is built from **train** scenes only (seen object types), so a base holding a held-out
  object type has no ``u(a₁, o₁)`` and is skipped (counted, never filled in): under an
  object-level holdout every ``test_ood`` base is skipped. The reference builds the bank from all
  scenes.
- the probe-joint hit (bag-level concept-probe check) is not computed.

Objects are given as int ``[N, 2, 2]`` ``(colour, shape)`` value indices per slot (left, right) in
one colour vocabulary and one shape vocabulary shared by both slots.
"""

from __future__ import annotations

import numpy as np
import torch

from mosaic.diagnostics.errors import DiagnosticError, refuse_held_out
from mosaic.diagnostics.probes import _np


def _check(x, objects, what: str) -> tuple[np.ndarray, np.ndarray]:
    x = _np(x, np.float32)
    o = _np(objects, np.int64)
    if x.ndim != 2 or o.shape != (len(x), 2, 2):
        raise DiagnosticError(f"interventions ({what}): embeddings must be [N, D] and objects [N, 2, 2] (slot, colour/shape) "
                              f"with the same N, got {x.shape} and {o.shape}")
    if len(o) and (o < 0).any():
        raise DiagnosticError(f"interventions ({what}): negative value indices; drop scenes without two labelled objects first")
    if not np.isfinite(x).all():
        raise DiagnosticError(f"interventions ({what}): the embeddings hold non-finite values")
    return x, o


def object_bank(x, objects, *, held_out=None, positional: bool = False) -> dict[tuple, np.ndarray]:
    """The bank of mean scene embeddings (float64 ``[D]``): ``(colour, shape) -> u`` over the
    scenes holding that object in either slot (reference ``avg_scene_position_independent``), or
    with ``positional`` ``(colour, shape, slot) -> u`` over the scenes holding it in that slot
    (``avg_scene_position_dependent``; slot 0 left, 1 right).

    Args:
        x: float ``[N, D]`` scene embeddings of the *train* split.
        objects: int ``[N, 2, 2]`` (slot, colour/shape).
        held_out: optional bool ``[N]``; any True raises (the bank holds seen object types only).
    Raises:
        LeakageError: a bank scene is flagged held-out; DiagnosticError: bad shapes.
    """
    x, o = _check(x, objects, "bank")
    refuse_held_out(len(x), held_out, "interventions", "bank scenes",
                    "hold held-out object types; the bank u(colour, shape) is built from the train split (seen types) only")
    keys = o.reshape(-1, 2)                                   # [2N, 2]: scene 0 left, scene 0 right, ...
    if positional:
        keys = np.concatenate([keys, np.tile([0, 1], len(o))[:, None]], 1)
    rows = np.repeat(x.astype(np.float64), 2, axis=0)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    sums = np.zeros((len(uniq), x.shape[1]))
    np.add.at(sums, inv, rows)
    counts = np.bincount(inv, minlength=len(uniq))
    return {tuple(int(v) for v in k): sums[i] / counts[i] for i, k in enumerate(uniq)}


def _rate(hits: np.ndarray) -> float | None:
    return float(hits.mean()) if len(hits) else None


def intervene(bases: tuple, bank: dict, gallery: tuple, *, strength: float = 1.0, seed: int = 42, batch_size: int = 2048,
              device="cpu", positional: bool = False, targets: str = "any") -> dict:
    """Edit each base scene's colours (left and right) and score retrieval over the gallery.

    Args:
        bases: ``(embeddings float [B, D], objects int [B, 2, 2])`` of the scenes to edit.
        bank: :func:`object_bank` of the train scenes (``positional``: built with
            ``positional=True``; the left edit uses left-slot entries, the right edit right-slot).
        gallery: ``(embeddings float [G, D], objects int [G, 2, 2])`` scenes retrieved from.
        strength: k in ``z − k·(u(a, o) − u(t, o))`` (reference 1).
        seed: seeds the target colour of each base (one ``numpy`` generator, bases in order).
        targets: ``any`` (the reference): t is drawn from every colour not in the base, and the
            base is skipped when a bank entry of t is missing; ``banked``: t is drawn from the
            colours whose entries ``u(t, o₁)``, ``u(t, o₂)`` are in the bank (under an
            object-level holdout many ``(t, o)`` are held-out types, so ``any`` skips many seen
            bases too).
        batch_size: queries per similarity block.
    Returns:
        ``{"n_bases", "skipped_same_shape", "skipped_missing_bank", "skipped_missing_control",
        "n_edits", "hit", "hit_unordered", "hit_first_indexed", "same_color": {"n", "hit", ...},
        "different_color": {...}, "left": {...}, "right": {...}}``; a rate is None without edits.
        Target colours are drawn from the colours of the gallery's scenes (the reference: of all
        its scenes).
    Raises:
        DiagnosticError: bad shapes, an empty gallery, strength not finite.
    """
    xb, ob = _check(bases[0], bases[1], "bases")
    xg, og = _check(gallery[0], gallery[1], "gallery")
    if not len(xg):
        raise DiagnosticError("interventions: the gallery is empty")
    if xb.shape[1] != xg.shape[1]:
        raise DiagnosticError(f"interventions: bases have width {xb.shape[1]}, the gallery {xg.shape[1]}")
    if not np.isfinite(strength):
        raise DiagnosticError(f"interventions: strength {strength} must be finite")
    if targets not in ("any", "banked"):
        raise DiagnosticError(f"interventions: targets {targets!r} must be 'any' or 'banked'")
    rng = np.random.default_rng(seed)
    colours = np.unique(og[:, :, 0])
    pair_first: dict[tuple, int] = {}
    for i, p in enumerate(map(tuple, og.reshape(len(og), 4).tolist())):
        pair_first.setdefault(p, i)
    queries, controls, first, same, left = [], [], [], [], []
    skipped = {"same_shape": 0, "missing_bank": 0, "missing_control": 0}
    for z, ((a1, o1), (a2, o2)) in zip(xb, ob.tolist()):
        if o1 == o2:
            skipped["same_shape"] += 1
            continue
        cand = colours[(colours != a1) & (colours != a2)]
        if targets == "banked":
            cand = np.array([c for c in cand if ((c, o1, 0) in bank and (c, o2, 1) in bank if positional
                                                 else (c, o1) in bank and (c, o2) in bank)], dtype=np.int64)
        if not len(cand):
            skipped["missing_bank"] += 1
            continue
        t = int(rng.choice(cand))
        keys = ((a1, o1, 0), (a2, o2, 1), (t, o1, 0), (t, o2, 1)) if positional else ((a1, o1), (a2, o2), (t, o1), (t, o2))
        us = [bank.get(k) for k in keys]
        if any(u is None for u in us):
            skipped["missing_bank"] += 1
            continue
        cl, cr = (t, o1, a2, o2), (a1, o1, t, o2)
        if cl not in pair_first or cr not in pair_first:
            skipped["missing_control"] += 1
            continue
        z = z.astype(np.float64)
        queries += [z - strength * (us[0] - us[2]), z - strength * (us[1] - us[3])]
        controls += [cl, cr]
        first += [pair_first[cl], pair_first[cr]]
        same += [a1 == a2] * 2
        left += [True, False]
    out: dict = {"n_bases": int(len(xb)), **{f"skipped_{k}": v for k, v in skipped.items()}, "n_edits": len(queries),
                 "strength": float(strength), "seed": int(seed)}
    if queries:
        g = torch.nn.functional.normalize(torch.from_numpy(xg).double().to(device), dim=1)
        q_all = torch.from_numpy(np.stack(queries)).to(device)
        top = torch.cat([(torch.nn.functional.normalize(q_all[s:s + batch_size], dim=1) @ g.T).argmax(1).cpu()
                         for s in range(0, len(q_all), batch_size)]).numpy()
        got = og.reshape(len(og), 4)[top]
        ctl = np.asarray(controls)
        hit = (got == ctl).all(1)
        hit_un = hit | (got == ctl[:, [2, 3, 0, 1]]).all(1)
        hit_first = top == np.asarray(first)
    else:
        hit = hit_un = hit_first = np.zeros(0, bool)
    same, left = np.asarray(same, bool), np.asarray(left, bool)
    out["hit"], out["hit_unordered"], out["hit_first_indexed"] = _rate(hit), _rate(hit_un), _rate(hit_first)
    for name, m in (("same_color", same), ("different_color", ~same), ("left", left), ("right", ~left)):
        out[name] = {"n": int(m.sum()), "hit": _rate(hit[m]), "hit_unordered": _rate(hit_un[m]), "hit_first_indexed": _rate(hit_first[m])}
    return out


def interventions(train: tuple, bases: dict[str, tuple], gallery: tuple, *, strength: float = 1.0, seed: int = 42,
                  batch_size: int = 2048, device="cpu", positional: bool = False, targets: str = "any") -> dict:
    """The intervention diagnostic: bank from the train scenes, edits of each base set.

    Args:
        train: ``(embeddings [N, D], objects int [N, 2, 2], held_out bool [N] or None)`` of the
            train split (the bank).
        bases: set name (``test_id`` seen, ``test_ood`` held-out) -> ``(embeddings, objects)``.
        gallery: ``(embeddings [G, D], objects [G, 2, 2])`` retrieved from.
        strength, seed, batch_size, device: see :func:`intervene` (each set uses its own
            generator seeded with ``seed``).
        positional: per-slot bank entries (reference ``avg_scene_position_dependent``).
        targets: ``any`` (reference) or ``banked`` (see :func:`intervene`).
    Returns:
        ``{"bank_entries": K, "gallery": G, set: intervene(...)}``.
    Raises:
        LeakageError: a held-out bank scene; DiagnosticError: bad shapes.
    """
    bank = object_bank(train[0], train[1], held_out=train[2], positional=positional)
    out: dict = {"bank": "position-dependent" if positional else "position-independent", "targets": targets, "bank_entries": len(bank),
                 "gallery": int(len(_np(gallery[1], np.int64)))}
    for name, b in bases.items():
        out[name] = intervene(b, bank, gallery, strength=strength, seed=seed, batch_size=batch_size, device=device,
                              positional=positional, targets=targets)
    return out
