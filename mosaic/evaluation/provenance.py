"""Honest measurement: refuse to score images with a spec that cannot read what they intend.

Scoring only the concepts a spec and the images' metadata share would report, e.g., 100 % joint
accuracy for images whose other concepts were never read. :func:`check_spec_reads` refuses:

- a concept the metadata intends that the spec does not have (the evaluator cannot read it);
- images that come from a dataset (a split folder of a generated dataset, or a run's samples
  folder, whose run recorded its dataset's manifest) whose concepts or domains differ from the
  spec's.
"""

from __future__ import annotations

from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.io import read_json
from mosaic.spec import parse_spec


def source_spec(images_dir: str | Path) -> tuple[dict, str] | None:
    """The spec data of the dataset the images come from, and the file it was read from, or None.

    Looks for ``images_dir/../manifest.json`` (a split folder of a dataset) and
    ``images_dir/../../dataset_manifest.json`` (``RUN/samples/<name>``: the run's copy of its
    dataset's manifest). An unreadable file is skipped (the folder may be anything), except the record
    of a run whose samples these are (``images_dir/sampling.json`` written by ``mosaic sample`` beside
    the run's ``dataset.json``): damaged or removed, it turned the drawing check off (attack round 23).

    Raises:
        MosaicError: a run's samples folder whose run holds no readable ``dataset_manifest.json``."""
    d = Path(images_dir).resolve()
    for cand in (d.parent / "manifest.json", d.parent.parent / "dataset_manifest.json"):
        if cand.is_file():
            try:
                man = read_json(cand)
            except (OSError, ValueError):  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
                continue
            if isinstance(man, dict) and isinstance(man.get("spec"), dict):
                return man["spec"], str(cand)
    run = d.parent.parent
    if (d / "sampling.json").is_file() and (run / "dataset.json").is_file():
        raise MosaicError([(str(run / "dataset_manifest.json"), "is missing or damaged (not a manifest holding a spec): these are "
                            f"samples of the run {run}, and that file says which spec drew its dataset, which --spec must "
                            "draw alike; restore it from the run's backup, or run the run's training command again (it writes the copy when "
                            "dataset.json still names the run's dataset)")])
    return None


#: the spec's sections that decide what an image shows, hence what an evaluator reads in it (the name, seed,
#: split sizes, holdout and description do not: held-out flags are checked against the spec on their own)
DRAWING = ("colors", "concepts", "distractors", "image", "layout", "objects", "positions", "relations", "sizes")


def _parsed(spec_data: dict):
    try:
        return parse_spec(spec_data)
    except MosaicError:
        return None


def check_spec_reads(records: list[dict], spec, images_dir: str | Path | None = None) -> None:
    """Raise MosaicError when ``spec`` cannot read every concept the records intend, or when the
    images come from a dataset whose concepts or domains differ from ``spec``'s (see the module
    docstring). The message names the concepts and the fix (``--spec`` the images were made for,
    e.g. the dataset folder)."""
    mine = {c: [str(v) for v in spec.domain(c)] for c in spec.concepts}
    intended = sorted({c for r in records for c in (r.get("concepts") or {})})
    unread = [c for c in intended if c not in mine]
    fix = "give --spec the spec the images were made for (a dataset folder works: its manifest holds the spec)"
    if unread:
        raise MosaicError([("--spec", f"the spec cannot read concept(s) {', '.join(map(repr, unread))} that the images' metadata "
                            f"intends (it reads {', '.join(mine)}): scoring only the shared concepts would report joint accuracy "
                            f"over concepts never read; {fix}")])
    if images_dir is None:
        return
    src = source_spec(images_dir)
    if src is None:
        return
    parsed = _parsed(src[0])
    if parsed is None:
        return
    theirs = {c: [str(v) for v in parsed.domain(c)] for c in parsed.concepts}
    problems = []
    for c in sorted(set(theirs) | set(mine)):
        if c not in mine:
            problems.append(f"concept {c!r} of the images' dataset is missing from the spec")
        elif c not in theirs:
            problems.append(f"concept {c!r} of the spec is not in the images' dataset")
        elif theirs[c] != mine[c]:
            problems.append(f"concept {c!r} has values {theirs[c]} in the images' dataset but {mine[c]} in the spec")
    if problems:
        raise MosaicError([("--spec", f"the images come from a dataset ({src[1]}) whose concepts differ from the spec's: "
                            f"{'; '.join(problems)}; {fix}")])
    a, b = parsed.to_dict(), spec.to_dict()
    drawn = [k for k in DRAWING if a.get(k) != b.get(k)]
    if drawn:  # same concepts, another drawing (object sizes, colours' RGB, shapes): the images were scored against what they never showed
        raise MosaicError([("--spec", f"the images come from a dataset ({src[1]}) whose spec draws them otherwise than this spec "
                            f"(it differs in {', '.join(drawn)}): the evaluator would read them against a drawing they do not show; "
                            f"{fix}")])
