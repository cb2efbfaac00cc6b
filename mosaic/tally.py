"""Streaming counts of a generated dataset: the leak check and the manifest's counts in memory
independent of the dataset's size.

:class:`Tally` sees the records one at a time (``add(split, index, concepts)``) and keeps only
per-split per-cell counts, the values seen per concept in ``train`` and the first violations, so
checking a 1M-image dataset holds a few thousand integers, not a million scene graphs. Its
:meth:`Tally.report` is the same JSON-ready report as :func:`mosaic.holdout.leak_check` (which
needs every record in memory); ``tests/test_tally.py`` checks that the two agree.
"""

from __future__ import annotations

import json

from mosaic.spec import Spec
from mosaic.holdout import EXCLUDED, HELD_OUT, SEEN

MAX_VIOLATIONS = 20  # per split, as in mosaic.holdout.leak_check


def _key(combo) -> str:
    return "|".join(map(str, combo))


class Tally:
    """Per-split counts of one dataset, filled record by record.

    Args:
        spec: the dataset's spec.
    Attributes:
        counts: ``{split: {"v1|v2": n}}`` samples per combination cell (with a holdout).
        totals: ``{split: n}`` records seen per split.
        values: ``{concept: {value: n}}`` in ``train``.
    """

    def __init__(self, spec: Spec):
        self.spec = spec
        self.grid = spec.grid
        self._held, self._seen = HELD_OUT, SEEN
        self.counts: dict[str, dict[str, int]] = {}
        self.totals: dict[str, int] = {}
        self.values: dict[str, dict] = {c: {} for c in spec.concepts}
        self.violations: dict[str, list] = {}
        self._status: dict[tuple, int] = {}

    def _status_of(self, combo: tuple) -> int | None:
        if combo not in self._status:
            self._status[combo] = self.grid.status_of(combo)
        return self._status[combo]

    def begin(self, split: str) -> None:
        """Register a split (so an empty one is reported with zero counts)."""
        self.totals.setdefault(split, 0)

    def add(self, split: str, index: int, concepts: dict) -> None:
        """Count one record (``concepts``: concept -> value, as read back from the scene)."""
        self.totals[split] = self.totals.get(split, 0) + 1
        if split == "train":
            for c, seen in self.values.items():
                v = concepts.get(c)
                seen[v] = seen.get(v, 0) + 1
        g = self.grid
        if g is None:
            return
        combo = tuple(concepts.get(c) for c in g.concepts)
        cnt = self.counts.setdefault(split, {})
        k = _key(combo)
        cnt[k] = cnt.get(k, 0) + 1
        want = self._held if split == "test_ood" else self._seen
        if self._status_of(combo) != want:
            bad = self.violations.setdefault(split, [])
            if len(bad) < MAX_VIOLATIONS:
                bad.append({"index": int(index), "combination": list(combo)})

    def add_records(self, split: str, records) -> None:
        """Count an iterable of records (dicts with ``index`` and ``concepts``)."""
        self.begin(split)
        for r in records:
            self.add(split, r["index"], r["concepts"])

    def report(self) -> dict:
        """The leak-check report (same keys and values as :func:`mosaic.holdout.leak_check`):
        ``passed``; ``checks`` (``every_value_in_train``, and with a holdout
        ``splits_respect_holdout``, ``every_seen_combination_in_train``); with a holdout also
        ``concepts``, ``coverage``, ``connected``, ``seen``, ``held_out``, ``excluded_count`` and
        ``counts`` (per split, per cell)."""

        spec, g = self.spec, self.grid
        checks: dict[str, dict] = {}
        if self.totals.get("train"):
            missing = {c: lost for c, k in spec.concepts.items() if (lost := [v for v in k.domain if v not in self.values[c]])}
            checks["every_value_in_train"] = {"passed": not missing, "missing": missing}
        else:
            checks["every_value_in_train"] = {"passed": True, "skipped": "no train split"}
        report: dict = {"checks": checks}
        if g is not None:
            counts = {s: dict(self.counts.get(s, {})) for s in self.totals}
            leaks = {s: v for s, v in self.violations.items() if v}
            checks["splits_respect_holdout"] = {"passed": not leaks, "violations": leaks}
            if self.totals.get("train"):  # an empty train split (splits.train: 0, as validate allows) trains on nothing
                seen_in_train = set(counts.get("train", {}))
                unseen = [list(c) for c in g.cells(self._seen) if _key(c) not in seen_in_train]
                checks["every_seen_combination_in_train"] = {"passed": not unseen, "missing": unseen[:50]}
            else:  # train is not written (streamed): its quotas cover every seen cell by construction
                checks["every_seen_combination_in_train"] = {"passed": True, "skipped": "no train split"}
            report.update({
                "concepts": g.concepts,
                "coverage": g.coverage,
                "connected": g.connected,
                "seen": [list(c) for c in g.cells(self._seen)],
                "held_out": [list(c) for c in g.cells(self._held)],
                "excluded_count": g.count(EXCLUDED),
                "counts": counts,
            })
        report["passed"] = all(c["passed"] for c in checks.values())
        return report


def counting(check, tally: Tally | None, split: str):
    """``check`` (a record's claims: why it contradicts its spec, or None) that also counts each record of
    ``split`` that passes it into ``tally`` (``check`` itself when there is no tally)."""
    if tally is None:
        return check

    def counted(rec: dict):
        why = check(rec)
        if why is None:
            tally.add(split, rec.get("index"), rec["concepts"])
        return why
    return counted


def leak_check_damage(stored, spec: Spec, splits: dict[str, int], tally: Tally | None = None) -> str | None:
    """Why a complete dataset's stored ``leak_check`` (``stored``) is not the one of its spec and
    records, or None. With ``tally`` (every record of ``splits`` counted as read back from
    ``metadata.jsonl``) the whole report must be :meth:`Tally.report` of it; without (a Parquet
    dataset, whose rows the quick check does not read) its spec-given fields (``concepts``,
    ``coverage``, ``connected``, ``seen``, ``held_out``, ``excluded_count``) must be the spec's,
    ``passed`` true, and each split's ``counts`` must add up to its ``count`` over cells of the
    right kind (held-out cells in ``test_ood`` only). An edited leak check (a held-out cell
    counted in train, the held-out and seen cells swapped) passed ``verify`` and was written into
    the card by ``--repair`` (attack round 23). A shape problem is :func:`mosaic.manifest_fields.leak_check_problem`'s.
    """
    if not isinstance(stored, dict):  # a complete dataset always has one (a shape problem is named elsewhere)
        return None if stored is not None else "leak_check is missing: a complete dataset records the leak check it passed"
    if tally is not None:
        want = json.loads(json.dumps(tally.report()))
        if want == stored:
            return None
        key = next((k for k in sorted(set(want) | set(stored)) if want.get(k) != stored.get(k)), "?")
        return f"leak_check.{key} is not the tally of the dataset's own records (recorded {str(stored.get(key))[:60]}, counted {str(want.get(key))[:60]})"
    fresh = Tally(spec)
    for s in splits:
        fresh.begin(s)
    ref = json.loads(json.dumps(fresh.report()))
    for k in ("concepts", "coverage", "connected", "seen", "held_out", "excluded_count"):
        if k in ref and stored.get(k) != ref[k]:
            return f"leak_check.{k} is not the spec's (recorded {str(stored.get(k))[:60]}, the spec gives {str(ref[k])[:60]})"
    if stored.get("passed") is not True:
        return "leak_check.passed is not true, but the dataset is complete (a dataset that failed its leak check is never complete)"
    if "counts" not in ref:
        return None
    counts = stored.get("counts") if isinstance(stored.get("counts"), dict) else {}
    if other := sorted(set(counts) - set(splits)):
        return f"leak_check.counts counts the split(s) {', '.join(map(str, other))[:60]}, which the dataset does not have"
    seen, held = ({_key(c) for c in ref[k]} for k in ("seen", "held_out"))
    for split, n in splits.items():
        c = counts.get(split) or {}
        allowed = held if split == "test_ood" else seen
        if sum(c.values()) != n or any(k not in allowed for k in c):
            return (f"leak_check.counts.{split} is not a tally of {n} records of its kind (it counts {sum(c.values())}"
                    + (f", among them {next(k for k in c if k not in allowed)!r}, a cell the spec does not put there" if any(k not in allowed for k in c) else "")
                    + ")")
    return None
