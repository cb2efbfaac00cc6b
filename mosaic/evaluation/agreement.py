"""Agreement between two evaluators on the same images (Cohen's kappa), and between an evaluator
and a person (the audit's agreement rate with its Wilson interval).

Cohen's kappa (Cohen 1960) corrects the observed agreement ``p_o`` for the agreement ``p_e``
expected by chance from each rater's label frequencies: ``kappa = (p_o - p_e) / (1 - p_e)``.
"""

from __future__ import annotations

import math
from collections import Counter


def cohen_kappa(a: list, b: list) -> float | None:
    """Cohen's kappa of two raters' categorical labels (any hashable values; None is a category,
    e.g. "unreadable").

    Args:
        a, b: the two raters' labels, one per item, same length.
    Returns:
        kappa in [-1, 1]; None when it is undefined (no items, or both raters give every item the
        same single label, so chance agreement is 1).
    Raises:
        ValueError: the lists differ in length.
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa(): {len(a)} labels against {len(b)}; give one label per item from each rater")
    n = len(a)
    if n == 0:
        return None
    ka = [_key(x) for x in a]
    kb = [_key(x) for x in b]
    po = sum(x == y for x, y in zip(ka, kb)) / n
    ca, cb = Counter(ka), Counter(kb)
    pe = sum(ca[k] * cb.get(k, 0) for k in ca) / (n * n)
    if pe >= 1.0:
        return None
    return (po - pe) / (1.0 - pe)


def _key(v):
    return "\x00unreadable" if v is None else str(v)


def compare_evaluators(records: list[dict], preds_a: list[dict], preds_b: list[dict], concepts: list[str],
                       names: tuple[str, str] = ("parser", "learned"), limit: int = 50) -> dict:
    """Agreement of two evaluators' reads of the same images.

    Args:
        records: one per image: ``concepts`` (intended values), optional ``file_name``, ``held_out``.
        preds_a, preds_b: each evaluator's reads (concept -> value, None = unreadable).
        concepts: the concepts compared.
        names: the evaluators' names, for the report.
        limit: at most this many disagreements are listed (verdict disagreements first).
    Returns:
        ``{"evaluators", "n", "kappa": {"verdict" (joint right / wrong), concept: kappa of the read
        values}, "agreement": {"verdict", concept: observed agreement}, "verdicts": {"both_right",
        "both_wrong", "<a>_only", "<b>_only"}, "disagreements": [{"file_name", "held_out",
        "intended", names[0], names[1], "verdicts"}], "disagreements_total"}``.
    """
    if not (len(records) == len(preds_a) == len(preds_b)):
        raise ValueError(f"compare_evaluators(): {len(records)} records, {len(preds_a)} and {len(preds_b)} reads")
    a_name, b_name = names
    va, vb, rows = [], [], []
    for r, pa, pb in zip(records, preds_a, preds_b):
        ta = all(_key(pa.get(c)) == str(r["concepts"].get(c)) for c in concepts)
        tb = all(_key(pb.get(c)) == str(r["concepts"].get(c)) for c in concepts)
        va.append(ta)
        vb.append(tb)
        differ = [c for c in concepts if _key(pa.get(c)) != _key(pb.get(c))]
        if differ:
            rows.append({"file_name": r.get("file_name"), "held_out": bool(r.get("held_out") or False), "intended": r["concepts"],
                         a_name: {c: pa.get(c) for c in concepts}, b_name: {c: pb.get(c) for c in concepts},
                         "verdicts": {a_name: "right" if ta else "wrong", b_name: "right" if tb else "wrong"}, "concepts": differ})
    rows.sort(key=lambda x: x["verdicts"][a_name] == x["verdicts"][b_name])  # verdict disagreements first (stable)
    n = len(records)
    kappa = {"verdict": cohen_kappa(va, vb)}
    agree = {"verdict": (sum(x == y for x, y in zip(va, vb)) / n) if n else None}
    for c in concepts:
        la = [p.get(c) for p in preds_a]
        lb = [p.get(c) for p in preds_b]
        kappa[c] = cohen_kappa(la, lb)
        agree[c] = (sum(_key(x) == _key(y) for x, y in zip(la, lb)) / n) if n else None
    return {
        "evaluators": [a_name, b_name], "n": n, "kappa": kappa, "agreement": agree,
        "verdicts": {"both_right": sum(x and y for x, y in zip(va, vb)), "both_wrong": sum((not x) and (not y) for x, y in zip(va, vb)),
                     f"{a_name}_only": sum(x and not y for x, y in zip(va, vb)), f"{b_name}_only": sum(y and not x for x, y in zip(va, vb))},
        "disagreements": rows[:limit], "disagreements_total": len(rows),
    }


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """Wilson score interval of a binomial proportion ``k / n`` (Wilson 1927), 95 % by default.

    Returns:
        ``(low, high)`` in [0, 1]; None when ``n`` is 0.
    Raises:
        ValueError: ``k`` outside ``[0, n]``.
    """
    if n == 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"wilson_interval(): {k} successes of {n} trials")
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))
