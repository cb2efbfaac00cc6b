"""Binding-study pieces: swap negatives, query sets, multi-positive loss and the ranking metric.

Source: Uselis, Koishigarina & Oh (2026), "How can embedding models bind concepts?", code
``amortization/scenes.py`` (swap negatives, in-batch query sets) and ``train_clean.py``
(``mean_active_soft_ce``, ``compute_correct_by_scene``). Object tuples are int value indices
``[A]`` over the tokenizer's attributes (:mod:`mosaic.lab.transformer.tokens`); object-type ids are their
mixed-radix index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from mosaic.lab.transformer.tokens import SceneTokenizer


def swap_negatives(objects, rng: np.random.Generator | None = None, k: int | None = None) -> list[tuple[int, ...]]:
    """Swap negatives of one scene: an object with one attribute value taken from another object.

    Every candidate is ``objects[i]`` with attribute ``a`` replaced by ``objects[j][a]`` for two
    objects ``i != j`` whose values of ``a`` differ, so exactly one attribute is exchanged; a
    candidate equal to a present object is dropped (it would be a positive), and duplicates are
    merged. (The reference code draws one random pair and attribute and may produce a present
    object; we enumerate the valid swaps instead.)

    Args:
        objects: the scene's object tuples, a sequence of ``A`` ints each (``-1`` rows are ignored).
        rng: draws ``k`` of the candidates (without replacement) when given with ``k``.
        k: how many to return (all when None or when fewer exist).
    Returns:
        Object tuples, in enumeration order (or the drawn order).
    """
    objs = [tuple(int(v) for v in o) for o in objects if int(o[0]) >= 0]
    present = set(objs)
    out: list[tuple[int, ...]] = []
    seen: set = set()
    for i, oi in enumerate(objs):
        for j, oj in enumerate(objs):
            if i == j:
                continue
            for a in range(len(oi)):
                if oi[a] == oj[a]:
                    continue
                cand = oi[:a] + (oj[a],) + oi[a + 1:]
                if cand in present or cand in seen:
                    continue
                seen.add(cand)
                out.append(cand)
    if k is not None and rng is not None and len(out) > k:
        pick = rng.choice(len(out), size=k, replace=False)
        out = [out[p] for p in pick]
    elif k is not None and len(out) > k:
        out = out[:k]
    return out


def object_positives(table: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Which object queries each scene holds.

    Args:
        table: int64 ``[B, M, A]`` object tuples per scene (``-1`` rows = no object).
        queries: int64 ``[Q, A]`` object tuples.
    Returns:
        bool ``[B, Q]``: scene b holds an object equal to query q.
    """
    valid = table[:, :, 0] >= 0                                          # [B, M]
    eq = (table[:, :, None, :] == queries[None, None, :, :]).all(-1)     # [B, M, Q]
    return (eq & valid[:, :, None]).any(1)


def concept_positives(table: torch.Tensor, radix: list[int]) -> torch.Tensor:
    """Which concept values (attribute values, in :meth:`SceneTokenizer.concept_queries` order)
    each scene shows: bool ``[B, sum(radix)]`` from an object table int64 ``[B, M, A]``."""
    valid = table[:, :, 0] >= 0                                          # [B, M]
    parts = []
    for a, r in enumerate(radix):
        hot = F.one_hot(table[:, :, a].clamp(min=0), r).bool() & valid[:, :, None]   # [B, M, r]
        parts.append(hot.any(1))
    return torch.cat(parts, 1)


def soft_cross_entropy(logits: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """Multi-positive cross-entropy: target uniform over each row's positives, mean over rows
    that have one (``mean_active_soft_ce`` of the reference code).

    Args:
        logits: float ``[B, Q]``; positives: bool ``[B, Q]``.
    Returns:
        scalar float; 0 (with a gradient path) when no row has a positive.
    """
    pos = positives.float()
    n = pos.sum(1)
    active = n > 0
    if not bool(active.any()):
        return logits.sum() * 0.0
    target = pos[active] / n[active, None]
    return -(target * F.log_softmax(logits[active].float(), dim=1)).sum(1).mean()


def ranking_correct(logits: torch.Tensor, positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The binding-generalization rule: a scene is correct when its lowest-scoring positive query
    outranks its highest-scoring negative one, ``min_{q in P} l_q > max_{q not in P} l_q``
    (``compute_correct_by_scene`` of the reference code).

    Args:
        logits: float ``[N, Q]`` similarity logits; positives: bool ``[N, Q]``.
    Returns:
        ``(correct bool [N], active bool [N])``: active rows have at least one positive; a row
        without negatives is correct; inactive rows are False.
    """
    logits = logits.float()
    active = positives.any(1)
    min_pos = logits.masked_fill(~positives, float("inf")).min(1).values
    max_neg = logits.masked_fill(positives, float("-inf")).max(1).values
    return (min_pos > max_neg) & active, active


def ranking_accuracy(logits: torch.Tensor, positives: torch.Tensor) -> float:
    """Mean of :func:`ranking_correct` over rows with a positive (nan when there is none)."""
    correct, active = ranking_correct(logits, positives)
    n = int(active.sum())
    return float(correct[active].float().mean()) if n else float("nan")


def similarity_logits(scene: torch.Tensor, query: torch.Tensor, log_tau: torch.Tensor, tau_max: float) -> torch.Tensor:
    """``exp(tau) * cos(scene, query)``: float ``[B, Q]`` from ``[B, D]`` and ``[Q, D]``; the scale
    is clamped at ``tau_max`` (the reference code clamps at 10 in training)."""
    s = F.normalize(scene.float(), dim=-1, eps=1e-6)
    q = F.normalize(query.float(), dim=-1, eps=1e-6)
    return log_tau.exp().clamp(max=tau_max) * (s @ q.T)


def ctoks_empty(ref: torch.Tensor) -> torch.Tensor:
    """An empty query token batch ``[0, 2]`` int64 on ``ref``'s device (a query kind that is off)."""
    return torch.zeros((0, 2), dtype=torch.long, device=ref.device)


def cat_queries(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Concatenate query token rows of different lengths (right-padded with PAD = 0)."""
    L = max(a.shape[1], b.shape[1])
    return torch.cat([F.pad(a, (0, L - a.shape[1])), F.pad(b, (0, L - b.shape[1]))])


def type_ids(tuples: torch.Tensor, radix: list[int]) -> torch.Tensor:
    """Mixed-radix object-type ids int64 ``[Q]`` (CPU) of object tuples ``[Q, A]``."""
    ids = torch.zeros(tuples.shape[0], dtype=torch.long)
    for a, r in enumerate(radix):
        ids = ids * r + tuples[:, a].cpu()
    return ids


def binding_metrics(concept_logits: torch.Tensor, object_logits: torch.Tensor, objects: torch.Tensor,
                    tokenizer: SceneTokenizer) -> dict:
    """Binding metrics of scenes from their logits against every concept value and object type.

    Args:
        concept_logits: float ``[N, V]`` (V concept values in :meth:`SceneTokenizer.concept_queries` order).
        object_logits: float ``[N, T]`` (every object type, in type-id order).
        objects: int64 ``[N, M, A]`` the scenes' object tuples (``-1`` rows: none).
    Returns:
        ``object_accuracy`` (min present-object logit > max absent-object logit, candidates = every
        object type, swap negatives included), ``concept_accuracy`` (same over concept values),
        ``swap_accuracy`` (candidates = present objects + the scene's swap negatives only, over
        the scenes that have one), ``no_swap_fraction`` (scenes without a swap negative: objects
        that share a value; a bag-of-concepts model can be right on them, so it is the floor of
        ``object_accuracy`` for a model with perfect concept recognition and no binding),
        ``object_accuracy_swap_scenes`` (``object_accuracy``, same rule and candidates, over the
        scenes with at least one swap negative only: there a bag-of-concepts model cannot be right,
        so its floor is 0 rather than ``no_swap_fraction``),
        ``object_accuracy_by_num_objects``, ``n``.
    """
    types = torch.from_numpy(tokenizer.all_object_types())
    opos = object_positives(objects, types)
    cpos = concept_positives(objects, tokenizer.radix)
    ocor, oact = ranking_correct(object_logits, opos)
    ccor, cact = ranking_correct(concept_logits, cpos)
    n_obj = (objects[:, :, 0] >= 0).sum(1)
    # swap-only candidates
    swap_ok, swap_n = 0, 0
    has_swap = torch.zeros(len(objects), dtype=torch.bool)
    for i in range(len(objects)):
        sw = swap_negatives(objects[i].tolist())
        if not sw:
            continue
        has_swap[i] = True
        neg = type_ids(torch.tensor(sw), tokenizer.radix)
        pos = opos[i]
        swap_ok += int(object_logits[i][pos].min() > object_logits[i][neg].max())
        swap_n += 1
    by_n = {}
    for k in sorted(set(n_obj.tolist())):
        sel = (n_obj == k) & oact
        if sel.any():
            by_n[str(k)] = float(ocor[sel].float().mean())
    swap_sel = oact & has_swap
    return {
        "object_accuracy": float(ocor[oact].float().mean()) if oact.any() else float("nan"),
        "concept_accuracy": float(ccor[cact].float().mean()) if cact.any() else float("nan"),
        "swap_accuracy": swap_ok / swap_n if swap_n else float("nan"),
        "object_accuracy_swap_scenes": float(ocor[swap_sel].float().mean()) if swap_sel.any() else float("nan"),
        "no_swap_fraction": 1.0 - swap_n / len(objects) if len(objects) else float("nan"),
        "object_accuracy_by_num_objects": by_n,
        "n": int(len(objects)),
    }
