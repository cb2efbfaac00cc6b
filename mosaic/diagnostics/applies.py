"""Which diagnostics apply to a run, decided from its family, its dataset's spec and its
conditioning before anything is computed (diagnostics.md §7; the table in
:mod:`mosaic.diagnostics.analyze` says which features each diagnostic reads).

:func:`not_applicable` names the diagnostics that do not apply (why, and the fix);
:func:`binding_slots` finds a 2-object colour/shape dataset's slots; :func:`resolve_what` turns
``--what`` / ``analysis.what`` into the diagnostics to run; :func:`check_analysis` validates a
config's ``analysis:`` section when a run's task is built. Needs no torch.
"""

from __future__ import annotations

from mosaic.diagnostics import DIAGNOSTICS
from mosaic.diagnostics.errors import DiagnosticError, NotApplicableError
from mosaic.diagnostics.rank import ordinal_concepts
from mosaic.vocab import closest


def not_applicable(family: str, spec, conditioning: str | None = None) -> dict[str, tuple[str, str]]:
    """Diagnostics that do not apply to a run: name -> (why, fix)."""

    out = {}
    if family == "transformer":
        out["diffusion-classifier"] = (
            "this is a transformer run; the diffusion classifier ranks conditions by a conditional diffusion model's "
            "denoising error, so it needs a diffusion run (mosaic train diffusion)", "leave it out of --what")
    elif conditioning == "caption":
        out["diffusion-classifier"] = (
            "the run uses caption conditioning; the classifier's candidates are concept-value combinations, which only "
            "factorized or combination conditioning can express", "train with model.conditioning: factorized")
    slots, why = binding_slots(spec)
    if slots is None:
        for d in ("binding-complexity", "interventions"):
            out[d] = (why, "these diagnostics apply to 2-object scenes with a colour and a shape concept per object "
                           "(e.g. experiments/specs/binding.yaml); leave them out of --what")
    if not ordinal_concepts(spec):
        roles = ", ".join(f"{c} ({r})" for c, r in spec.roles.items())
        out["rank"] = (f"the dataset has no ordinal concept (concepts: {roles})",
                       "rank axes apply to count, size and position (angle-bin) concepts; leave 'rank' out of --what")
    return out


def binding_slots(spec) -> tuple[list[tuple[str, str]] | None, str | None]:
    """The ``(colour concept, shape concept)`` of each object of a 2-object scene, in template
    (label) order, or ``(None, why)`` when the dataset is not one: the binding diagnostics
    (binding complexity, interventions) need exactly two objects per scene (no distractors, no
    repeats), each with its colour and its shape bound to a concept of its own."""
    ts = spec.templates
    names = ", ".join(t.name for t in ts)
    if len(ts) != 2:
        return None, f"the dataset's scenes are built from {len(ts)} object template(s) ({names}), not 2 objects"
    slots = []
    for t in ts:
        if t.repeat.value != 1:
            return None, f"object {t.name!r} repeats (repeat {t.repeat.model_dump(exclude_none=True)}), so scenes do not hold exactly 2 objects"
        if t.color.concept is None or t.shape.concept is None:
            return None, f"object {t.name!r} does not bind both its colour and its shape to a concept"
        slots.append((t.color.concept, t.shape.concept))
    if len({c for sl in slots for c in sl}) != 4:
        return None, f"the two objects share a colour or shape concept ({slots}); each object needs its own"
    return slots, None


def resolve_what(what: list[str] | None, family: str, spec, conditioning: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The diagnostics to run and the ones skipped (name -> why).

    ``what`` None: every diagnostic that applies (the others listed as skipped). Given explicitly,
    a diagnostic that does not apply is an error.

    Raises:
        NotApplicableError: a requested diagnostic that does not apply (named, with why).
        DiagnosticError: an unknown name.
    """

    bad = not_applicable(family, spec, conditioning)
    if what is None:
        return [d for d in DIAGNOSTICS if d not in bad], {d: why for d, (why, _) in bad.items()}
    unknown = [d for d in what if d not in DIAGNOSTICS]
    if unknown:
        hints = [f"{u!r} -> {m!r}" for u in unknown if (m := closest(u, list(DIAGNOSTICS), cutoff=0.6))]
        raise DiagnosticError(f"--what {','.join(unknown)}: not a diagnostic; choose from {', '.join(DIAGNOSTICS)}"
                              + (f" (did you mean {', '.join(hints)}?)" if hints else ""))
    for d in what:
        if d in bad:
            raise NotApplicableError(d, *bad[d])
    return [d for d in DIAGNOSTICS if d in what], {}


def check_analysis(cfg, family: str, spec) -> None:
    """Validate a config's ``analysis:`` section against the dataset before anything is trained
    (called when the run's task is built, before the run folder is touched).

    Raises:
        NotApplicableError: ``analysis.what`` names a diagnostic that does not apply to the run.
    """
    opts = getattr(cfg, "analysis", None)
    if opts is not None:
        resolve_what(opts.what, family, spec, getattr(cfg.model, "conditioning", None) if family == "diffusion" else None)
