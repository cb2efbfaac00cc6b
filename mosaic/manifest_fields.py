"""Fields of a dataset manifest that mosaic writes for itself and reads back as data: their shape is
checked where every reader and writer reads the manifest (:func:`mosaic.verify.read_manifest`), so an
edited one is named (exit 2) instead of a traceback or a repair by the wrong layout (attack round 17).

- ``leak_check`` (:meth:`mosaic.tally.Tally.report`): ``verify --repair`` writes the card's leak-check
  section from it;
- ``renderer`` (``{"name", "supersample"}``): ``verify --repair``, a resumed ``generate``, ``export`` and
  ``--against-spec`` render the samples again with the backend it names.
"""

from __future__ import annotations

import math

from renderers import BACKENDS


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _cells(v) -> bool:
    return isinstance(v, list) and all(isinstance(c, list) and all(isinstance(x, (str, int, float)) for x in c) for c in v)


def leak_check_problem(lc) -> str | None:
    """Why a manifest's stored ``leak_check`` is not of the shape :meth:`Tally.report` writes, or None
    (absent is None): ``verify --repair`` writes the card's leak-check section from it, so a
    ``coverage`` of ``"abc"``, ``checks`` that are a list or ``counts`` of a number were tracebacks
    (attack round 17). The message names the field and the value."""
    if lc is None:
        return None
    if not isinstance(lc, dict):
        return f"leak_check is {str(lc)[:40]!r}, not a mapping"
    checks = lc.get("checks", {})
    problems = [
        ("passed", "passed" in lc and not isinstance(lc["passed"], bool), "true or false"),
        ("checks", not isinstance(checks, dict) or not all(isinstance(c, dict) and isinstance(c.get("passed"), bool)
                                                            for c in checks.values()), "a mapping of checks, each with passed true or false"),
        ("coverage", "coverage" in lc and not _real(lc["coverage"]), "a finite number"),
        ("concepts", "concepts" in lc and not (isinstance(lc["concepts"], list) and all(isinstance(c, str) for c in lc["concepts"])),
         "a list of concept names"),
        *((k, k in lc and not _cells(lc[k]), "a list of combination cells") for k in ("seen", "held_out")),
        ("counts", "counts" in lc and not (isinstance(lc["counts"], dict) and all(
            isinstance(c, dict) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in c.values())
            for c in lc["counts"].values())), "a mapping of splits to per-cell sample counts"),
    ]
    for key, bad, want in problems:
        if bad:
            return f"leak_check.{key} is {str(lc.get(key))[:40]!r}, not {want}"
    return None


def renderer_problem(man: dict) -> str | None:
    """Why the manifest's ``renderer`` record is not one mosaic writes, or None (absent is None): a
    mapping whose ``name`` is a backend (:data:`renderers.BACKENDS`) that renders the manifest's spec
    (``shaded`` only for a spec whose ``image.renderer`` is ``shaded``) and whose ``supersample``, if
    given, is a whole number > 0 (absent is None). ``"renderer": "pillow"``, a null or an unknown name had ``verify
    --repair`` fail with a traceback; ``shaded`` on a flat spec too."""
    if "renderer" not in man:
        return None
    rec = man["renderer"]
    if not isinstance(rec, dict):
        return f"renderer is {str(rec)[:40]!r}, not a mapping of name and supersample"
    name, ss = rec.get("name", "pillow"), rec.get("supersample", 1)
    if not isinstance(name, str) or name not in BACKENDS:
        return f"renderer.name is {str(name)[:40]!r}, not one of {', '.join(BACKENDS)}"
    image = (man.get("spec") or {}).get("image")
    if name == "shaded" and not (isinstance(image, dict) and image.get("renderer") == "shaded"):
        return "renderer.name is 'shaded', but the manifest's spec is drawn flat (image.renderer is not shaded)"
    if not (isinstance(ss, int) and not isinstance(ss, bool) and ss > 0):
        return f"renderer.supersample is {str(ss)[:40]!r}, not a whole number > 0"
    if isinstance(image, dict) and "supersample" in image and image["supersample"] != ss:  # attack round 27
        return f"renderer.supersample is {ss!r}, but the manifest's spec draws at image.supersample {image['supersample']!r}"
    return None


#: the manifest format this mosaic writes and reads (:data:`mosaic.records.FORMAT`; kept here so that the
#: readers' check does not import the generator)
FORMAT = "mosaic-dataset/2"


def identity_problem(man: dict) -> str | None:
    """Why the manifest is not one whose files can be vouched for, or None (attack round 18):

    - its ``format`` is not :data:`FORMAT` (``other-tool/1``, ``mosaic-dataset/99``, ``2``): verify and the
      readers took it as a mosaic dataset while ``generate --overwrite`` refused it;
    - a complete imagefolder dataset without its ``checksums`` record (absent, null or ``{}``): every
      imagefolder dataset of this format records the digests of its files, and without the record the
      full check was skipped, so two swapped images were read as an old dataset's (wrong labels, exit 0)."""
    if man.get("format") != FORMAT:
        return f"format is {str(man.get('format'))[:40]!r}: this mosaic reads {FORMAT} datasets only"
    spec = man.get("spec")
    if isinstance(spec, dict) and "name" in spec and "name" in man and man["name"] != spec["name"]:  # a run records it (round 27)
        return f"name is {str(man['name'])[:40]!r}, but its spec's name is {str(spec['name'])[:40]!r}"
    if man.get("storage", "imagefolder") == "imagefolder" and man.get("status") == "complete" and not man.get("checksums"):
        return "its checksums record (the digests of every file) is gone, so its files cannot be vouched for"
    return None


def fields_problem(man: dict) -> str | None:
    """The first problem of :func:`identity_problem`, :func:`leak_check_problem` and :func:`renderer_problem`, or None."""
    return identity_problem(man) or leak_check_problem(man.get("leak_check")) or renderer_problem(man)
