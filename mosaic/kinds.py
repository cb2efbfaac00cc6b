"""What kind of mosaic file a YAML mapping looks like: a spec, a training config or a sweep.

A file of the wrong kind (a spec given to ``mosaic train``, a config to ``mosaic validate``) would
otherwise fail with a wall of "unknown field" errors; :func:`check_kind` names the kind it looks like
and the command that takes it instead.
"""

from __future__ import annotations

from typing import Any, Callable

#: top-level fields that only one kind of file has
DISTINCTIVE = {
    "spec": ("objects", "concepts", "image", "layout", "splits", "holdout", "distractors", "relations", "positions", "colors", "sizes"),
    "training config": ("dataset", "training", "model", "sampling", "evaluation", "objective", "input", "classifier", "binding"),
    "sweep": ("grid", "zip", "seeds", "seed_key", "set", "kind", "config", "report", "timeout_s"),
    "dataset manifest": ("fingerprint", "format", "storage", "leak_check", "versions"),
}

COMMANDS = {
    "spec": "`mosaic validate`, `mosaic generate` and `mosaic splits` take specs; a training config names one under dataset.spec",
    "training config": "`mosaic train diffusion|transformer CONFIG` takes training configs; a sweep names one under config",
    "sweep": "`mosaic sweep SWEEP` takes sweeps",
    "dataset manifest": "give the dataset folder (commands that take a SPEC accept it), not a file inside it",
}


def guess_kind(data: Any) -> str | None:
    """The kind whose distinctive top-level fields ``data`` has most of, or None (not a mapping,
    or none of them)."""
    if not isinstance(data, dict):
        return None
    keys = {str(k) for k in data}
    scores = {kind: len(keys & set(fields)) for kind, fields in DISTINCTIVE.items()}
    if scores["sweep"] and "kind" in keys and "config" in keys:
        scores["sweep"] += 2  # `kind` + `config` are what makes a sweep
    best = max(scores, key=scores.get)
    return best if scores[best] else None


def check_kind(data: Any, expected: str, source: str, error: Callable[[str], Exception]) -> None:
    """Raise ``error(message)`` when ``data`` has none of the ``expected`` kind's distinctive fields
    but looks like another kind; the message names that kind, the fields that show it and the
    command that takes it."""
    if not isinstance(data, dict):
        return
    keys = {str(k) for k in data}
    own = keys & set(DISTINCTIVE[expected])
    if expected == "sweep":
        own = keys & {"kind", "config", "grid", "zip", "seeds"}
    guess = guess_kind(data)
    if guess is None or guess == expected:
        return
    theirs = sorted(keys & set(DISTINCTIVE[guess]))
    if own and len(own) >= len(theirs):
        return
    raise error(f"{source} looks like a {guess} (it has {', '.join(theirs)}), not a {expected}: {COMMANDS[guess]}")


#: top-level fields of one training family's config only (``mosaic train diffusion|transformer``)
FAMILY_FIELDS = {
    "diffusion": ("sampling",),
    "transformer": ("objective", "input", "classifier", "binding"),
}


def family_of(fields) -> str | None:
    """The training family (``diffusion``, ``transformer``) whose config class has the top-level
    ``fields`` (e.g. ``DiffusionConfig.model_fields``), or None."""
    return next((f for f, own in FAMILY_FIELDS.items() if set(own) <= set(fields)), None)


def check_family(data: Any, expected: str | None, source: str, error: Callable[[str], Exception]) -> None:
    """Raise ``error(message)`` when a training config meant for the ``expected`` family has none of
    that family's own top-level fields but some of another family's (or a diffusion backbone,
    ``model.backbone: unet|dit``): the message names the family it looks like and its command,
    instead of a wall of unknown fields. (Reads the raw mapping only: imports nothing.)"""
    if not isinstance(data, dict) or expected not in FAMILY_FIELDS:
        return
    keys = {str(k) for k in data}
    model = data.get("model")
    backbone = model.get("backbone") if isinstance(model, dict) else None
    for family, own in FAMILY_FIELDS.items():
        if family == expected:
            continue
        theirs = sorted(keys & set(own)) + (["model.backbone: " + str(backbone)] if family == "diffusion" and backbone in ("unet", "dit") else [])
        if theirs and not keys & set(FAMILY_FIELDS[expected]):
            raise error(f"{source} looks like a {family} config (it has {', '.join(theirs)}), not a {expected} config: "
                        f"`mosaic train {family} CONFIG` takes it")
