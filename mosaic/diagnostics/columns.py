"""Sweep columns of a run's ``analysis`` entry (no numpy or torch: ``mosaic sweep`` collects with it)."""

from __future__ import annotations

SEEN, HELD = "test_id", "test_ood"


def analysis_columns(analysis: dict | None) -> dict:
    """Flat sweep columns of a run's ``analysis`` entry (numbers only):

    - ``probe.<split>.<concept>`` / ``probe.<split>.mean``: concept-probe accuracy (split
      ``test_id`` / ``test_ood``); ``slot_probe.<split>``: slot-wise binding-probe object
      accuracy; ``binding_probe.<split>``: keyed (colour given shape) probe accuracy, seen splits;
      ``set_probe.<split>.concept`` / ``.object``: order-free set probes (concept mean; object
      tuples, nan where a scene holds a type never trained);
    - ``layers.seen.<layer>`` / ``layers.held_out.<layer>``, ``layers.last_held_out``,
      ``layers.best_by_val_held_out``, ``layers.best_held_out``, ``layers.gain_over_last``;
    - ``factorization.r2``, ``.r2_whitened``, ``.r2_lstsq``, ``.heldout_r2``, ``.cross_abs_cos``,
      ``.within_abs_cos``, ``.probe_span_r2``, ``.k95.<concept>``;
    - ``rank.<concept>.<axis>.<split>.spearman`` (axis ``extremes`` / ``fitted``);
    - ``binding_complexity.<family>.<split>.r2`` / ``.probe_concept`` / ``.probe_object`` (family
      ``regular_mlp`` / ``mult_linear`` / ``sum_mult_linear``, split ``train`` / ``test_id`` /
      ``test_ood``);
    - ``interventions.<split>.hit`` / ``.hit_unordered`` / ``.hit_first_indexed`` / ``.n_edits`` /
      ``.skipped_missing_bank``, ``interventions.<split>.<same_color|different_color>.hit``;
    - ``diffusion_classifier.<seen|held_out>.joint`` and ``.<concept>``, ``.images_per_s``;
    - ``seconds.<diagnostic>``.
    """
    if not analysis:
        return {}
    row: dict = {}

    def put(k, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[f"analysis.{k}"] = v

    p = analysis.get("probes") or {}
    for split, acc in (p.get("concept") or {}).items():
        if split in (SEEN, HELD, "test") and isinstance(acc, dict):
            for c, v in acc.items():
                if c != "n":
                    put(f"probe.{split}.{c}", v)
    for split, v in (p.get("binding") or {}).items():
        if isinstance(v, dict):
            put(f"binding_probe.{split}", v.get("accuracy"))
    for split, v in (p.get("slots") or {}).items():
        if isinstance(v, dict):
            put(f"slot_probe.{split}", v.get("object_accuracy"))
    for split, v in (p.get("set") or {}).items():
        if isinstance(v, dict):
            put(f"set_probe.{split}.concept", v.get("concept_mean"))
            put(f"set_probe.{split}.object", v.get("object"))
    lay = analysis.get("layers") or {}
    for group in ("seen", "held_out"):
        for name, v in zip(lay.get("layers", []), lay.get(group, [])):
            put(f"layers.{group}.{name}", v)
    for k in ("last_held_out", "best_by_val_held_out", "best_held_out", "gain_over_last"):
        put(f"layers.{k}", lay.get(k))
    fac = analysis.get("factorization") or {}
    for k in ("r2", "r2_whitened", "r2_lstsq"):
        put(f"factorization.{k}", fac.get(k))
    put("factorization.heldout_r2", (fac.get("heldout") or {}).get("r2"))
    put("factorization.cross_abs_cos", (fac.get("abs_cos") or {}).get("cross"))
    put("factorization.within_abs_cos", (fac.get("abs_cos") or {}).get("within"))
    put("factorization.probe_span_r2", (fac.get("probe_span_r2") or {}).get("mean"))
    for c, k in (fac.get("k95") or {}).items():
        put(f"factorization.k95.{c}", k)
    for c, r in (analysis.get("rank") or {}).items():
        for axis in ("extremes", "fitted"):
            for split, v in (r.get(axis) or {}).items():
                if isinstance(v, dict) and "spearman" in v:
                    put(f"rank.{c}.{axis}.{split}.spearman", v["spearman"])
    bcx = analysis.get("binding_complexity") or {}
    for fam, r in (bcx.get("families") or {}).items():
        for split in ("train", SEEN, HELD, "test"):
            for k in ("r2", "probe_concept", "probe_object"):
                put(f"binding_complexity.{fam}.{split}.{k}", (r.get(split) or {}).get(k))
    itv = analysis.get("interventions") or {}
    for split in (SEEN, HELD, "test"):
        r = itv.get(split)
        if isinstance(r, dict):
            for k in ("hit", "hit_unordered", "hit_first_indexed", "n_edits", "skipped_missing_bank", "skipped_missing_control"):
                put(f"interventions.{split}.{k}", r.get(k))
            for g in ("same_color", "different_color"):
                put(f"interventions.{split}.{g}.hit", (r.get(g) or {}).get("hit"))
    dcr = analysis.get("diffusion_classifier") or {}
    for group in ("seen", "held_out"):
        for k, v in (dcr.get(group) or {}).items():
            if k not in ("n", "wrong_by_concept", "marginal"):
                put(f"diffusion_classifier.{group}.{k}", v)
    put("diffusion_classifier.images_per_s", dcr.get("images_per_s"))
    for k, v in (analysis.get("seconds") or {}).items():
        put(f"seconds.{k}", v)
    return row
