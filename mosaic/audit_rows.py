"""Whether a samples folder's ``predictions.jsonl`` is one whole evaluation of its ``metadata.jsonl``, as its
``metrics.json`` counted it: what ``mosaic audit`` checks before it shows any of the rows' verdicts to a person.

A row given twice, rows dropped, or a verdict edited beside its own image (the row's ``read`` rewritten to the
intended values, ``correct`` true) were put on the audit page as the evaluator's (attack round 29). Each row must be
one record's, once (``file_name``), with that record's intended values and held-out flag, and the rows must give the
``n``, ``joint_accuracy`` and per concept ``accuracy`` and ``unreadable`` of the overall, seen and held-out groups
that ``metrics.json`` recorded (:func:`mosaic.evaluation.metrics.score` computed them from the same verdicts): a
wrong read re-filed as unreadable, or moved to another concept, was audited too (attack round 30). A wrong read
changed to another wrong value, or an edited ``reasons`` text, changes no figure: only reading the image again
would tell.
"""

from __future__ import annotations

from mosaic.lab.run_record import numbers_close


def _group(rows: list[dict], concepts: list) -> dict:
    """A group's figures from its rows: ``n``, ``joint_accuracy`` (verdicts right), and per concept ``accuracy.<c>``
    (read as intended) and ``unreadable.<c>`` (read as nothing), as :func:`mosaic.evaluation.metrics.score` counts them."""
    n = len(rows)
    out = {"n": n, "joint_accuracy": (sum(r.get("correct") is True for r in rows) / n) if n else None}
    for c in concepts:
        reads = [(r.get("read") or {}, r.get("intended") or {}) for r in rows]
        out[f"accuracy.{c}"] = sum(c in i and rd.get(c) == i[c] for rd, i in reads) / n if n else None
        out[f"unreadable.{c}"] = sum(rd.get(c) is None for rd, _ in reads) / n if n else None
    return out


def evaluation_problem(rows: list[tuple[int, dict]], records: list[tuple[int, dict]], metrics) -> str | None:
    """Why ``rows`` (``(line, row)`` of ``predictions.jsonl``) are not one whole evaluation of ``records`` (``(line,
    record)`` of ``metadata.jsonl``) as ``metrics`` (its ``metrics.json``) counted it, or None."""
    by_name: dict = {}
    for ln, r in records:
        by_name.setdefault(r.get("file_name"), (ln, r))
    seen: set = set()
    for ln, row in rows:
        name = row.get("file_name")
        if name in seen:
            return f"line {ln}: scores {str(name)[:80]!r} a second time: each image is scored once"
        seen.add(name)
        rec = by_name.get(name)
        if rec is None:
            return f"line {ln}: scores {str(name)[:80]!r}, an image metadata.jsonl does not list"
        want = rec[1].get("concepts")
        if isinstance(want, dict) and row.get("intended") is not None and row.get("intended") != want:
            return f"line {ln}: its intended values are not those of metadata.jsonl line {rec[0]}"
        if (row.get("held_out") is True) != (rec[1].get("held_out") is True) and rec[1].get("held_out") is not None:
            return f"line {ln}: its held_out is not that of metadata.jsonl line {rec[0]}"
    missing = [n for n in by_name if n not in seen]
    if missing:
        return f"{len(missing)} of metadata.jsonl's {len(by_name)} images have no row (e.g. {str(missing[0])[:80]!r})"
    if not isinstance(metrics, dict):
        return "metrics.json is no mapping"
    plain = [r for _, r in rows]
    groups = {"overall": plain, "seen": [r for r in plain if r.get("held_out") is not True],
              "held_out": [r for r in plain if r.get("held_out") is True]}
    for g, sel in groups.items():
        rec = metrics.get(g)
        if not isinstance(rec, dict):
            if sel and g != "overall":
                return f"metrics.json has no {g} figures, while {len(sel)} rows are {g.replace('_', '-')}"
            continue
        acc = rec.get("accuracy") if isinstance(rec.get("accuracy"), dict) else {}
        got = _group(sel, sorted(acc))
        for k, v in got.items():
            part, _, c = k.partition(".")
            if c and not isinstance(rec.get(part), dict):  # a figure metrics.json does not record is not compared
                continue
            r = rec.get(k) if not c else rec[part].get(c)
            same = (v is None and r is None) or (isinstance(r, (int, float)) and not isinstance(r, bool) and v is not None
                                                 and numbers_close(r, v, 1e-9, 1e-9))
            if not same:
                return (f"metrics.json's {g}.{k} is {str(r)[:30]}, but the rows give {v if v is None else round(v, 6)}: the verdicts "
                        "are not the ones the evaluation counted")
    return None
