"""A dry run of the layout search across a whole split, before anything is written.

Generation lays out scene ``i`` of a split from its own seeded generator, and stops with a
:class:`~mosaic.errors.LayoutError` at the first scene the bounded search cannot place. A spec whose
largest scenes fit only sometimes (for example five circles at least 0.1 apart, whose centres must
fall in a small square) passes the spec's area check and the first few samples, then fails hundreds
of scenes into generation, or in the middle of a sweep. :func:`check_layouts` samples scenes spread
evenly over every split (the same indices generation will draw, so a failure here is a failure
there), counts the failures and refuses with the estimated number of scenes that would fail and the
fields that fix it.

Used by ``mosaic validate`` and by every ``--dry-run`` that estimates a run (``train``, ``sweep``,
``reproduce``: :func:`mosaic.lab.probe.spec_and_records`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mosaic.errors import LayoutError
from mosaic.sampling import sample_scene

#: scenes sampled per split by default: a layout that fails in 1 scene of 100 is caught with
#: probability 1 - 0.99 ** 256 = 92 %, 1 of 50: 99.4 %.
PROBE_SCENES = 256


@dataclass(frozen=True)
class LayoutProbe:
    """What :func:`check_layouts` saw in one split.

    Attributes:
        split: split name.
        size: scenes in the split.
        sampled: scenes laid out (indices spread evenly over ``range(size)``).
        failed: indices whose layout search failed.
        objects: ``(fewest, most)`` objects in a sampled scene (``(0, 0)`` when none was placed).
        first_error: the layout search's message for the first failing index (None when none failed).
    """

    split: str
    size: int
    sampled: int
    failed: tuple[int, ...]
    objects: tuple[int, int]
    first_error: str | None = None


def probe_indices(size: int, k: int) -> list[int]:
    """``min(size, k)`` distinct indices spread evenly over ``range(size)``, the first and last included."""
    if size <= k:
        return list(range(size))
    return sorted({round(j * (size - 1) / (k - 1)) for j in range(k)})


def probe_layouts(spec, k: int = PROBE_SCENES) -> list[LayoutProbe]:
    """Lay out up to ``k`` scenes of every non-empty split of ``spec`` (no image, no record) and
    record which fail. Deterministic: the scenes are the dataset's own (``sample_scene(spec, split, i)``)."""
    out = []
    for split, n in spec.split_sizes().items():
        if not n:
            continue
        idx = probe_indices(n, k)
        failed, counts, first = [], [], None
        for i in idx:
            try:
                scene, _ = sample_scene(spec, split, i)
            except LayoutError as e:
                failed.append(i)
                first = first or str(e)
                continue
            counts.append(len(scene.objects))
        out.append(LayoutProbe(split, n, len(idx), tuple(failed), (min(counts), max(counts)) if counts else (0, 0), first))
    return out


_CHECKED: dict[tuple[str, int], list[LayoutProbe]] = {}  # (fingerprint, k) -> probes of a spec that passed


def check_layouts(spec, k: int = PROBE_SCENES) -> list[LayoutProbe]:
    """:func:`probe_layouts`, raising when any sampled scene cannot be laid out. A spec that passed
    is remembered by its fingerprint (which fixes every scene), so a sweep's dry run checks each
    distinct dataset once.

    Raises:
        LayoutError: naming the split, how many of the sampled scenes failed, the first failing
            index with the search's own message (the object and the fields to change), the
            estimated number of the split's scenes that would fail, and the layout fields
            (``layout.max_restarts``, ``layout.max_tries``) that make a rare failure rarer.
    """
    key = (spec.fingerprint(), k)
    if key in _CHECKED:
        return _CHECKED[key]
    probes = probe_layouts(spec, k)
    bad = [p for p in probes if p.failed]
    if not bad:
        _CHECKED[key] = probes
        return probes
    lines = []
    for p in bad:
        est = len(p.failed) if p.sampled == p.size else max(1, round(len(p.failed) / p.sampled * p.size))
        lines.append(f"split {p.split}: {len(p.failed)} of {p.sampled} scenes sampled across its {p.size} could not be laid out "
                     f"(indices {', '.join(map(str, p.failed[:5]))}{', ...' if len(p.failed) > 5 else ''}); "
                     f"{'exactly' if p.sampled == p.size else 'about'} {est} of its scenes would fail")
    detail = f"\n  first failure: {bad[0].first_error}"
    lay = spec.layout
    raise LayoutError(
        "generation would stop at the first scene it cannot lay out:\n  " + "\n  ".join(lines) + detail
        + f"\n  a layout that fits only sometimes succeeds more often with more whole-scene restarts: raise layout.max_restarts "
        f"(now {lay.max_restarts}) or layout.max_tries (now {lay.max_tries}); or make the scene roomier (fewer or smaller objects, "
        "a smaller layout.min_gap, a larger image)"
    )
