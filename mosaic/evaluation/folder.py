"""Score any model's images: a folder with a ``metadata.jsonl`` of intended concept values, read
by an evaluator, with the evaluator's own accuracy attached and one row per image."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import time
from pathlib import Path

import numpy as np

from mosaic.cellsets import EXCLUDED
from mosaic.checksums import MAX_LINE_BYTES, TOO_LONG, bounded_lines
from mosaic.dataset import iter_metadata
from mosaic.errors import MosaicError
from mosaic.folder_kinds import kind_hint
from mosaic.grammar import domain_index
from mosaic.evaluation.check import Evaluator, evaluator_accuracy, explanations, threshold_of
from mosaic.spec import Spec
from mosaic.evaluation.agreement import compare_evaluators
from mosaic.evaluation.copies import copy_stats
from mosaic.evaluation.metrics import score, write_metrics
from mosaic.evaluation.provenance import check_spec_reads
from mosaic.evaluation.quality import below_threshold, quality_settings, quality_summary, read_images
from mosaic.holdout import is_held_out
from mosaic.png import FOREIGN_FORMATS, decode_image, eval_pixel_bound, pixel_digest
from mosaic.io import atomic_text_writer, atomic_write, check_output_dir, make_output_dir, read_bounded, read_json
from mosaic.locks import reading
from mosaic.records import spec_from_data
from mosaic.shard_checks import shard_bounds
from mosaic.verify import MANIFEST, MANIFEST_LIMIT, check_before_read, read_manifest_checked


#: most bytes a metadata.jsonl to evaluate may hold (a record is about 1 KB: 1 GiB is a million images)
MAX_METADATA_BYTES = 1 << 30


def read_folder(images_dir: str | Path) -> list[dict]:
    """The records of ``images_dir/metadata.jsonl`` (generator schema: ``file_name``, ``concepts``,
    optional ``held_out``).

    Each record's ``file_name`` must be a relative path to a file inside the folder (no ``..``,
    not absolute) that no other record names (after normalising the path: ``./images/a.png`` is
    ``images/a.png``), and ``held_out``, when given, a JSON boolean (``"false"`` is refused: it would
    count as held out).

    A split folder of a mosaic dataset (its parent holds ``manifest.json``) is read as every reader
    of a dataset reads it: the dataset's quick check first (:func:`mosaic.verify.check_before_read`),
    then its records by :func:`mosaic.dataset.iter_metadata` (each the record of its own sample).

    Raises:
        MosaicError: missing or malformed (not UTF-8, not JSON, nested too deep, a record without
            ``file_name`` or ``concepts``), naming the line and the fix; DatasetError: a damaged dataset.
    """
    d = Path(images_dir)
    meta = d / "metadata.jsonl"
    if not d.is_dir():
        raise MosaicError(f"{d} is {'not a folder' if d.exists() else 'missing'}: give a folder of images with a metadata.jsonl "
                          "(a dataset split such as DATASET/test_ood, or a run's samples folder)")
    if not meta.is_file():
        what = "missing" if not os.path.lexists(meta) else "not a regular file (a folder, link or pipe stands there)"
        if (hint := kind_hint(d, "images")) and not os.path.lexists(meta):  # a dataset or run given for its samples
            raise MosaicError(f"{meta} is missing: {hint}")
        raise MosaicError(f"{meta} is {what}: a folder to evaluate needs a metadata.jsonl with one JSON object per image "
                          '({"file_name": "images/000000.png", "concepts": {...}, "held_out": false})')
    if meta.stat().st_size > MAX_METADATA_BYTES:
        raise MosaicError(f"{meta} holds {meta.stat().st_size:,} bytes, more than {MAX_METADATA_BYTES:,}: evaluate a smaller folder")
    real = d.resolve()  # a split reached through a link or 'images/..' is still its dataset's split (attack round 23)
    if (real.parent / MANIFEST).is_file():  # a split of a mosaic dataset: read as every reader of a dataset reads it
        d = real
        man = check_before_read(d.parent)  # damage, a foreign file, an edited spec: named, never scored
        if d.name not in man.get("splits", {}):
            raise MosaicError(f"{d} lies in the dataset {d.parent} but is not one of its splits ({', '.join(man.get('splits', {}))}): "
                              f"give a split folder such as {d.parent / 'test_ood'}")
        recs = list(iter_metadata(d.parent, d.name, man))  # each record its own sample's, index by index
        if not recs:
            raise MosaicError(f"{meta} holds no records: nothing to evaluate")
        return recs
    recs = []
    seen: dict[str, int] = {}  # normalised file_name -> its first line: one image is scored for one record only
    with os.fdopen(_own_records(meta), "rb") as f:
        for ln, raw in enumerate(bounded_lines(f), start=1):
            if not raw.strip():
                continue
            if raw is TOO_LONG:
                raise MosaicError(f"{meta} line {ln} is longer than {MAX_LINE_BYTES:,} bytes (not read): one flat JSON object per image")
            try:
                r = loads_record(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise MosaicError(f"{meta} line {ln} is not UTF-8 text ({e.reason} at byte {e.start}): write the file as UTF-8 JSON lines") from None
            except RecursionError:
                raise MosaicError(f"{meta} line {ln} is nested too deep to be a record: one flat JSON object per image") from None
            except ValueError as e:
                raise MosaicError(f"{meta} line {ln} is not valid JSON ({str(e)[:120]})") from None
            if not isinstance(r, dict) or "file_name" not in r or not isinstance(r.get("concepts"), dict):
                raise MosaicError(f"{meta} line {ln}: a record needs 'file_name' and a 'concepts' mapping of intended values")
            problem = file_name_problem(r["file_name"])
            if problem:
                raise MosaicError([(f"{meta} line {ln}", f"file_name {str(r['file_name'])[:80]!r} {problem}: give the image's path "
                                    "relative to the folder, e.g. images/000000.png")])
            norm = os.path.normpath(r["file_name"].replace("\\", "/"))
            if norm in seen:
                raise MosaicError([(f"{meta} line {ln}", f"file_name {r['file_name'][:80]!r} names the same image as line {seen[norm]}: "
                                    "each record needs its own image file (two records scored from one file would hide "
                                    "a failed sample behind a good one); give every record the path of its own image")])
            seen[norm] = ln
            if "held_out" in r and r["held_out"] is not None and not isinstance(r["held_out"], bool):
                raise MosaicError([(f"{meta} line {ln}", f"held_out = {str(r['held_out'])[:40]!r} ({type(r['held_out']).__name__}): it "
                                    "must be a JSON boolean, true or false (a string such as \"false\" would count as held out)")])
            recs.append(r)
    if not recs:
        raise MosaicError(f"{meta} holds no records: nothing to evaluate")
    return recs


def _own_records(meta: Path) -> int:
    """A read descriptor of the folder's own ``metadata.jsonl``: opened ``O_NOFOLLOW``, a regular file
    with one name. A symbolic or hard link there (to another samples folder's records, of another K or
    seed) scored this folder's images against another folder's intended values, exit 0.

    Raises:
        MosaicError: a link, naming it and the fix."""
    try:
        fd = os.open(meta, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        fd = None
    if fd is None or os.fstat(fd).st_nlink > 1:
        if fd is not None:
            os.close(fd)
        raise MosaicError([(str(meta), f"is a {'symbolic' if fd is None else 'hard'} link: a folder's records are read only "
                            "from its own file (a link may carry another folder's intended values); copy the file into the folder")])
    return fd


def _unique_keys(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {twice[:40]!r} given twice in one object (readers differ on which counts): write it once")
    return d


def loads_record(text: str):
    """One JSON line of a folder another program wrote (a folder to evaluate, a samples folder's
    rows): :func:`json.loads`, except that an object giving one key twice is refused (ValueError),
    since two readers of the line (mosaic's, the program's) could take different values from it."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def file_name_problem(name) -> str | None:
    """Why a record's ``file_name`` cannot name a file inside its folder, or None."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a path string"
    if not name or "\x00" in name or len(name) > 4096:
        return "is not a path"
    try:
        os.fsencode(name)
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON): no file can have the name
        return "is not a path (it holds a character no file name can have, a lone surrogate)"
    p = Path(name)
    if not p.parts:  # ".", "./": the folder itself
        return "names the folder itself, not an image file in it"
    if p.is_absolute() or name.startswith(("/", "\\")):
        return "is absolute: it would read a file outside the folder"
    if ".." in p.parts or ".." in name.replace("\\", "/").split("/"):
        return "leaves the folder ('..'): it would read a file outside it"
    return None


def check_held_out(records: list[dict], spec: Spec, where: Path) -> None:
    """Every record's ``held_out`` (when given) must agree with the spec: a combination the spec
    holds out is held out, any other is seen (:func:`mosaic.holdout.is_held_out`). A folder whose
    flags contradict the spec would be scored as given: refused, and so is a combination the spec
    excludes (in no split, neither seen nor held out). A record without a flag (absent or
    null) gets the spec's (set in ``records``): images of held-out combinations are never scored as
    seen for want of a flag (attack round 18).

    Raises:
        MosaicError: naming the first records that disagree and the fix.
    """
    if spec.holdout is None:
        bad = [(k, r) for k, r in enumerate(records) if r.get("held_out") is True]
        if bad:
            raise MosaicError([(f"{where / 'metadata.jsonl'} line {bad[0][0] + 1}", f"held_out is true, but spec {spec.name!r} holds "
                                "nothing out: drop the held_out flags, or give the spec the images were made for (--spec)")])
        return

    bad, excluded = [], []
    for k, r in enumerate(records):
        conc = r.get("concepts")
        if not isinstance(conc, dict) or any(domain_index(spec.domain(c), conc.get(c)) is None for c in spec.concepts):
            continue  # a concept missing or not of its domain is named for that by score(), not as a flag the spec contradicts
        try:
            status = spec.grid.status_of(conc) if spec.grid is not None else None
            want = bool(is_held_out(spec, r["concepts"]))
        except Exception:  # noqa: BLE001 - values the spec cannot place are refused by check_spec_reads first
            continue
        if status == EXCLUDED:  # in no split: neither seen nor held out (attack round 23: scored as seen)
            excluded.append((k, r))
            continue
        if r.get("held_out") is None:
            r["held_out"] = want  # no flag: the spec decides
        elif want != r["held_out"]:
            bad.append((k, r, want))
    if excluded:
        k, r = excluded[0]
        raise MosaicError([(f"{where / 'metadata.jsonl'} line {k + 1}",
                            f"{r['concepts']} is a combination spec {spec.name!r} excludes ({len(excluded)} record(s)): no split "
                            "shows it, so it is neither seen nor held out and has no score; drop those images, or give the spec "
                            "the images were made for (--spec)")])
    if bad:
        k, r, want = bad[0]
        raise MosaicError([(f"{where / 'metadata.jsonl'} line {k + 1}",
                            f"held_out is {str(r['held_out']).lower()}, but spec {spec.name!r} {'holds out' if want else 'sees'} "
                            f"{r['concepts']} ({len(bad)} record(s) disagree): the flags contradict the spec; drop held_out (the spec "
                            "decides it) or give the spec the images were made for (--spec)")])


def load_images(d: Path, records: list[dict], spec: Spec | None = None) -> list[np.ndarray]:
    """Decode each record's image, its pixel count checked from the header first against
    :func:`mosaic.png.eval_pixel_bound` of the spec's image size (a decompression bomb is refused
    unread)."""

    bound = eval_pixel_bound(spec.image.size) if spec is not None else None
    if spec is not None and len(records) * spec.image.size ** 2 * 3 > FOLDER_IMAGE_BYTES:
        raise _too_many(d, len(records), spec.image.size)
    files: dict[tuple[int, int], str] = {}  # (device, inode) -> file_name: two names linked to one file are one image
    stats = [_own_image(d, r["file_name"]) for r in records]
    for r, st in zip(records, stats):
        other = files.setdefault((st.st_dev, st.st_ino), r["file_name"])
        if other != r["file_name"]:
            raise MosaicError([(str(d / "metadata.jsonl"), f"records {other!r} and {r['file_name']!r} name one image file (a link): "
                                "each record needs its own image file")])
    out, held = [], 0
    for r, st in zip(records, stats):
        p = d / r["file_name"]
        if st.st_nlink > 1:  # a hard link: its other name may lie outside the folder
            raise MosaicError([(str(d / "metadata.jsonl"), f"image {r['file_name']!r} is a hard link (the file has other names, maybe "
                                "outside the folder): only the folder's own files are scored; copy the image into the folder")])
        try:
            with open(p, "rb", opener=lambda path, flags: os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))) as f:
                out.append(decode_image(f, where=str(p), error=MosaicError, max_pixels=bound, formats=FOREIGN_FORMATS))
            held += out[-1].nbytes
            if held > FOLDER_IMAGE_BYTES:  # images larger than the spec's (refused after decoding) add up too
                raise _too_many(d, len(records), spec.image.size if spec is not None else out[-1].shape[0])
        except OSError as e:  # replaced by a link since it was checked
            raise MosaicError(f"image {p} cannot be opened as the folder's own file ({e.strerror or e})") from None
    return out


#: most bytes of decoded images one evaluation holds (every image is scored from memory): 8 GiB, about 700,000
#: images of 64 px; a folder of more is refused before any image is decoded, naming how to score it in parts
FOLDER_IMAGE_BYTES = 8 * 2**30


def _too_many(d: Path, n: int, side: int) -> MosaicError:
    per = max(1, FOLDER_IMAGE_BYTES // (side * side * 3))
    return MosaicError([(str(d / "metadata.jsonl"), f"{n:,} images of {side} px would hold more than {FOLDER_IMAGE_BYTES / 2**30:g} GiB of "
                         f"decoded pixels at once: score the folder in parts of at most {per:,} images (each its own folder "
                         "with its own metadata.jsonl)")])


def _own_image(d: Path, name: str) -> os.stat_result:
    """The ``lstat`` of the image ``name`` of the folder ``d`` to score: a regular file reached through
    no symbolic link (the file itself or a folder on its path inside ``d``), as every reader of the
    data path refuses links; a link could score a file outside the folder as this record's image.

    Raises:
        MosaicError: missing, a link, not a regular file, or a name the file system refuses.
    """
    p = d / name
    where = f"image {name!r} listed in {d / 'metadata.jsonl'}"
    fix = "give each record the file_name of its own image file in the folder (copy the image in, not a link)"
    try:
        parts = Path(name).parts
        for k in range(1, len(parts) + 1):
            sub = d.joinpath(*parts[:k])
            st = os.lstat(sub)
            if stat.S_ISLNK(st.st_mode):
                raise MosaicError([(where, f"{sub} is a symbolic link (to {os.readlink(sub)[:120]}): links are never followed; {fix}")])
    except FileNotFoundError:
        raise MosaicError(f"image {p} listed in {d / 'metadata.jsonl'} is missing") from None
    except OSError as e:  # a name the file system refuses (too long, ...): named, never a traceback
        raise MosaicError(f"{where} cannot be opened ({e.strerror or e}): {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        raise MosaicError([(where, f"{p} is not a regular file (a folder, device or FIFO): {fix}")])
    return st


def check_image_size(images: list[np.ndarray], records: list[dict], spec: Spec, where: Path) -> None:
    """Refuse images of another size than ``spec.image.size``: the evaluator's accuracy check renders
    the spec at its own size, so it would vouch for reads at a size it never measured (a 64 px spec
    over 16 px images scored silently with a clean check).

    Raises:
        MosaicError: naming the first such image, its size, the spec's size and the fix.
    """
    want = (spec.image.size, spec.image.size)
    bad = [i for i, im in enumerate(images) if tuple(im.shape[:2]) != want]
    if bad:
        h, w = images[bad[0]].shape[:2]
        fix = "square images of a size a spec takes"
        try:  # only a size the spec takes is advised (a 1 x 1 image was advised `--set image.size=1`, attack round 31)
            fix = f"--set image.size={w}" if h == w and type(spec.image).model_validate({**spec.image.model_dump(), "size": w}) else fix
        except ValueError:  # pydantic's ValidationError: under 8 px
            pass
        raise MosaicError([(str(where / records[bad[0]]["file_name"]),
                            f"{len(bad)} of {len(images)} image(s) are not {want[0]} x {want[1]} px (this one is {w} x {h}), the size "
                            f"spec {spec.name!r} renders: the evaluator's check measures it at {want[0]} px, not at the images' size. "
                            f"Give the spec the images were made from, or its size ({fix})")])


def _predict_any_size(evaluator: Evaluator, images: list[np.ndarray], batch_size: int) -> tuple[list[dict], list | None]:
    """Predict in batches of consecutive images of one shape; also the parser's full reads
    (:func:`mosaic.evaluation.quality.read_images`; None for other evaluators)."""

    preds: list[dict] = []
    reads: list | None = [] if hasattr(evaluator, "read") else None
    i = 0
    while i < len(images):
        j = i
        while j < len(images) and j - i < batch_size and images[j].shape == images[i].shape:
            j += 1
        p, r = read_images(evaluator, np.stack(images[i:j]))
        preds += p
        if reads is not None:
            reads += r
        i = j
    return preds, reads


def evaluate_folder(images_dir: str | Path, spec: Spec, evaluator: Evaluator, out: str | Path | None = None,
                    check_n: int = 500, batch_size: int = 256, compare: Evaluator | None = None,
                    copies_of: str | Path | None = None) -> dict:
    """Score a folder of images whose intended concept values are in ``metadata.jsonl``.

    Any model's images can be scored: each record gives ``file_name`` (relative to the folder),
    ``concepts`` (intended values) and optionally ``held_out``. The result is
    :func:`mosaic.evaluation.metrics.score` plus ``evaluator`` (its name, its own accuracy from
    :func:`evaluator_accuracy`, threshold, ``trusted``) and ``flagged`` (True when the evaluator
    is below its threshold: such a result must not be reported unmarked), and ``results``
    (per image: intended, read, correct, reasons). For the parser it adds ``quality``
    (:func:`mosaic.evaluation.quality.quality_summary`: mean match quality seen / held-out, reads
    abstained, verdicts abstention changed). With ``compare`` (a second evaluator, e.g. a learned
    one) it adds ``agreement`` (:func:`mosaic.evaluation.agreement.compare_evaluators`: Cohen's
    kappa per concept and of the verdicts, disagreements listed). With ``copies_of`` (the dataset
    the model trained on) it adds ``copies`` (:func:`training_copies`: near-copies of training
    images among the seen samples). With ``out`` it writes
    ``metrics.json``, ``metrics.csv``, ``heatmap.png`` and ``predictions.jsonl``.

    Raises:
        MosaicError: a missing or malformed metadata.jsonl, a missing image, or intended values
            that do not belong to the spec.
    """

    d = Path(images_dir)
    if out is not None:
        check_output_dir(out, "out")  # before any work: never into a dataset, a file or an unwritable place
    # a split of a dataset is read under the dataset's shared lock, from its check to its last image (mosaic.locks.reading)
    with reading(d.parent, MosaicError) if d.is_dir() and (d.parent / MANIFEST).is_file() else contextlib.nullcontext():
        records = read_folder(d)
        if copies_of is not None:
            _refuse_another_training_set(d, Path(copies_of), spec)
        side = _training_side(copies_of, None, "train") if copies_of is not None else None  # a wrong dataset fails before scoring
        check_spec_reads(records, spec, d)  # a concept the spec cannot read, or another dataset's images: refuse
        check_held_out(records, spec, d)  # held_out flags that contradict the spec are never scored as given
        images = load_images(d, records, spec)
    check_image_size(images, records, spec, d)  # the evaluator is checked at the spec's size: the images must be that size
    copies = _copies(records, images, d, side) if side is not None else None  # the images read once
    t = time.perf_counter()
    preds, reads = _predict_any_size(evaluator, images, batch_size)
    seconds = time.perf_counter() - t
    metrics = score(records, preds, spec)
    if reads is not None:
        metrics["quality"] = quality_summary(records, reads, spec, evaluator)
    if compare is not None:
        other, _ = _predict_any_size(compare, images, batch_size)
        metrics["agreement"] = compare_evaluators(records, preds, other, list(spec.concepts),
                                                  names=(evaluator.name, getattr(compare, "name", "other")))
    acc = evaluator_accuracy(spec, evaluator, n=check_n) if check_n > 0 else None
    thr = threshold_of(evaluator)
    below = [c for c, v in (acc or {}).get("accuracy", {}).items() if v is None or v < thr]
    metrics["evaluator"] = {
        "name": evaluator.name, "threshold": thr,
        "check": None if acc is None else {k: acc.get(k) for k in ("n", "accuracy", "joint_accuracy", "degradation", "source", "split")},
        "below_threshold": below, "trusted": acc is not None and not below,
    }
    metrics["flagged"] = acc is None or bool(below)
    if metrics["flagged"]:
        if acc is None:
            why = "its accuracy was not checked"
        else:
            measured = ", ".join(f"{c} {'unmeasured' if acc['accuracy'][c] is None else format(acc['accuracy'][c], '.2%')}" for c in below)
            why = f"it is below {thr:.1%} on {measured} (on {acc.get('n')} fresh renders)"
        metrics["flag_reason"] = f"measured with evaluator {evaluator.name!r}, but {why}"
    if copies is not None:
        metrics["copies"] = copies
    metrics["images_dir"] = str(d)
    metrics["evaluation_seconds"] = round(seconds, 3)
    results = prediction_rows(records, preds, spec, evaluator, images, reads=reads)
    if out is not None:
        title = f"{spec.name}: joint accuracy per combination ({evaluator.name})" + (" — FLAGGED evaluator" if metrics["flagged"] else "")
        # an evaluation killed while it rewrites the folder leaves metrics.json saying so, never an earlier evaluation's
        # metrics beside this one's predictions (or the reverse): the metrics are written last
        atomic_write(make_output_dir(out, "out") / "metrics.json", json.dumps(INCOMPLETE) + "\n")
        write_prediction_rows(results, Path(out) / "predictions.jsonl")
        write_metrics(metrics, out, spec, title=title)
    metrics["results"] = results
    return metrics


#: what ``metrics.json`` of an ``evaluate --out`` folder holds while its files are rewritten
INCOMPLETE = {"status": "incomplete", "written_by": "mosaic evaluate",
              "note": "an evaluation was writing this folder and did not finish: its files are of two evaluations; rerun it"}


def prediction_rows(records: list[dict], preds: list[dict], spec: Spec, evaluator=None, images=None, reads=None) -> list[dict]:
    """One row per image: ``file_name``, ``held_out``, ``intended`` (the record's concepts), ``read``
    (the evaluator's values, None = unreadable), ``correct`` (every concept read as intended),
    ``image_sha256`` (:func:`mosaic.png.pixel_digest` of the image scored, when ``images`` are given) and
    ``reasons`` (one line per wrong concept, plus the evaluator's own explanation of the image
    when it has ``explain`` and ``images`` (uint8 ``[N, H, W, 3]`` or a list) are given); with the
    parser's ``reads`` also ``quality`` (match quality in [0, 1]), ``measures``, ``abstained``, ``below`` (a
    measure under the evaluator's threshold, abstention on or off) and ``raw`` (the values before abstention):
    what :func:`mosaic.evaluation.quality.quality_from_predictions` derives the quality figures from again."""
    wrong = [i for i, (r, p) in enumerate(zip(records, preds)) if any(p.get(c) != r["concepts"].get(c) for c in spec.concepts)]
    why: dict = {}
    if evaluator is not None and images is not None and wrong and len({images[i].shape for i in wrong}) == 1:
        why = dict(zip(wrong, explanations(evaluator, np.stack([images[i] for i in wrong]))))
    rows = []
    thresholds = quality_settings(evaluator)[0]
    for i, (r, p) in enumerate(zip(records, preds)):
        bad = [c for c in spec.concepts if p.get(c) != r["concepts"].get(c)]
        reasons = [f"{c}: read {p.get(c)!r}, intended {r['concepts'].get(c)!r}" for c in bad] + why.get(i, [])
        row = {"file_name": r.get("file_name"), "held_out": r.get("held_out") is True, "intended": r["concepts"],
               "read": p, "correct": not bad, "reasons": reasons}
        if images is not None:  # the image scored, by its pixels: mosaic audit shows a verdict only beside that image
            row["image_sha256"] = pixel_digest(images[i])
        if reads is not None:
            q = reads[i]
            row.update({"quality": round(q.quality, 4), "measures": {k: round(v, 4) for k, v in q.measures.items()},
                        "abstained": q.abstained, "below": below_threshold(q, thresholds),
                        "raw": dict(q.raw_values if q.raw_values is not None else q.values)})
        rows.append(row)
    return rows


def write_prediction_rows(rows: list[dict], path: Path) -> None:
    """Write :func:`prediction_rows` as JSON lines."""
    with atomic_text_writer(path) as f:  # a link at the name is replaced, never written through
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")


def training_copies(samples_dir: str | Path, dataset_dir: str | Path, *, reference: str | None = None,
                    train_split: str = "train") -> dict:
    """How many of a samples folder's images are near-copies of the training images
    (:func:`mosaic.evaluation.copies.copy_stats`: nearest-training-image RMSE of each sample against
    that of fresh renders of a held-back split).

    Only samples of seen combinations are measured (``held_out`` not true in the folder's
    records): no training image shows a held-out one.

    Args:
        samples_dir: a folder of generated images with ``metadata.jsonl`` (``mosaic sample``'s).
        dataset_dir: the mosaic dataset the model trained on.
        reference: the split of fresh renders to compare with (default: ``test_id``, else
            ``test``, else ``val``: the first that exists).
        train_split: the split the model trained on.
    Returns:
        :func:`~mosaic.evaluation.copies.copy_stats`, with ``reference.split``, ``train.split``
        and ``dataset``.
    Raises:
        MosaicError: a folder without ``metadata.jsonl``, a missing split, no seen samples,
            images of another size than the training images.
    """
    d = Path(samples_dir)
    records = _records_of(d, "the samples folder")
    side = _training_side(dataset_dir, reference, train_split)  # the dataset checked (and its spec read) first
    return _copies(records, load_images(d, records, side[2]["spec"]), d, side)


def _records_of(folder: Path, what: str) -> list[dict]:
    if not (folder / "metadata.jsonl").is_file():
        raise MosaicError(f"{what} {folder} has no metadata.jsonl: give a samples folder or a mosaic dataset")
    return read_folder(folder)


def _stack(ims: list[np.ndarray], folder: Path, what: str) -> np.ndarray:
    if not ims:
        raise MosaicError(f"{what} {folder} holds no images")
    if len({im.shape for im in ims}) != 1:
        raise MosaicError(f"{what} {folder} holds images of several sizes: {sorted({im.shape for im in ims})}")
    return np.stack(ims)


def _refuse_another_training_set(d: Path, ds: Path, spec: Spec) -> None:
    """Samples at ``RUN/samples/NAME``: ``--copies`` must be the dataset RUN trained on (the fingerprint and manifest
    sha256 its ``dataset.json`` records); another one (a regenerated copy, another seed) measured near-copies of
    images the model never saw, exit 0. A folder elsewhere names no run: ``--copies`` must then be a dataset of the
    spec the images are read against (its fingerprint; another seed's was measured, attack round 24)."""
    run = d.parent.parent
    if d.parent.name != "samples" or not (run / "run.json").is_file() or not (run / "dataset.json").is_file():
        try:
            got = json.loads(read_bounded(ds / MANIFEST, MANIFEST_LIMIT)).get("fingerprint")
        except (OSError, ValueError, AttributeError):  # named by the dataset's own check
            return
        if got != spec.fingerprint():
            raise MosaicError([("--copies", f"{str(ds)!r} is a dataset of another spec (fingerprint {str(got)[:20]}) than the one the "
                                            f"images are read against ({spec.name!r}, {spec.fingerprint()}): give the dataset the "
                                            "model trained on, made from that spec")])
        return
    try:
        rec, raw = read_json(run / "dataset.json"), read_bounded(ds / MANIFEST, MANIFEST_LIMIT)
        man = json.loads(raw)
    except (OSError, ValueError):  # a damaged manifest is named by the dataset's own check; a damaged record is the run's
        return
    if not isinstance(rec, dict) or not isinstance(man, dict):
        return
    want, got = (rec.get("fingerprint"), rec.get("manifest_sha256")), (man.get("fingerprint"), hashlib.sha256(raw).hexdigest())
    if want != got:
        raise MosaicError([("--copies", f"{str(ds)!r} is not the dataset the run {run} trained on: its dataset.json records "
                                        f"fingerprint {want[0]} and manifest sha256 {str(want[1])[:16]}, this dataset has {got[0]} and "
                                        f"{got[1][:16]}; give the run's own dataset ({str(rec.get('path'))[:200]})")])


def _training_side(dataset_dir: str | Path, reference: str | None, train_split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """The training images and the reference split's images of ``dataset_dir`` (uint8 ``[M, H, W, 3]``,
    ``[R, H, W, 3]``) and what they are (``reference``, ``train_split``, ``dataset``)."""
    ds = Path(dataset_dir)
    # a reader like every other: the quick check first (not a dataset, damaged, stray files, a spec edited after
    # generation: refused, named), then images decoded only up to the pixel bound of the dataset's own spec, all under
    # the dataset's shared lock (mosaic.locks.reading)
    try:
        read_manifest_checked(ds)
    except MosaicError as e:
        raise MosaicError([("--copies", f"{str(ds)!r}: the dataset the model trained on is checked before it is read")] + e.problems) from None
    with reading(ds, MosaicError):
        return _training_images(ds, reference, train_split)


def _training_images(ds: Path, reference: str | None, train_split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    try:
        man = check_before_read(ds)
    except MosaicError as e:
        raise MosaicError([("--copies", f"{str(ds)!r}: the dataset the model trained on is checked before it is read")] + e.problems) from None
    ds_spec = spec_from_data(man["spec"])  # the manifest the check read, not a second read of it
    parquet = man.get("storage") == "parquet"  # a run trains on either form: its rows' PNG bytes are read as MosaicDataset reads them
    if reference is None:
        reference = next((s for s in ("test_id", "test", "val")
                          if (s in man.get("splits", {}) if parquet else (ds / s / "metadata.jsonl").is_file())), None)
        if reference is None:
            raise MosaicError(f"--copies {ds}: no test_id, test or val split with a metadata.jsonl to compare with: "
                              "give the mosaic dataset the model trained on")
    sides = []
    for split in (train_split, reference):
        what = f"the {split!r} split"
        ims = _parquet_images(ds, man, split, ds_spec) if parquet else load_images(ds / split, _records_of(ds / split, what), ds_spec)
        sides.append(_stack(ims, ds / split, what))
    train, ref = sides
    if ref.shape[1:] != train.shape[1:]:
        raise MosaicError(f"the {reference!r} images of {ds} are {ref.shape[2]}x{ref.shape[1]} px and its training images "
                          f"{train.shape[2]}x{train.shape[1]} px: give a mosaic dataset")
    return train, ref, {"reference": reference, "train_split": train_split, "dataset": str(ds), "spec": ds_spec}


def _parquet_images(ds: Path, man: dict, split: str, spec: Spec) -> list[np.ndarray]:
    """The images of one split of a Parquet dataset (already checked), each page sized from its header first."""
    from mosaic.parquet import iter_records

    shard_bounds(ds, split, man)
    return [decode_image(row["image"]["bytes"], where=f"{ds}/data ({split} row {k})", error=MosaicError, exact_size=spec.image.size)
            for k, row in enumerate(iter_records(ds, split, columns=["image"], manifest=man))]


def _copies(records: list[dict], images: list[np.ndarray], folder: Path, side: tuple[np.ndarray, np.ndarray, dict]) -> dict:
    """:func:`training_copies` of already-read samples (``records`` and their decoded ``images``)."""
    train, ref, about = side
    # a held-out combination is in no training image: its samples cannot be copies
    seen = [im for r, im in zip(records, images) if r.get("held_out") is not True]
    if not seen:
        raise MosaicError(f"the samples folder {folder} holds no images of seen combinations")
    samples = _stack(seen, folder, "the samples folder")
    if samples.shape[1:] != train.shape[1:]:
        raise MosaicError(f"the samples are {samples.shape[2]}x{samples.shape[1]} px and the training images of "
                          f"{about['dataset']} {train.shape[2]}x{train.shape[1]} px: give the dataset the model trained on")
    out = copy_stats(samples, train, ref)
    out["reference"]["split"] = about["reference"]
    out["train"]["split"] = about["train_split"]
    out["dataset"] = about["dataset"]
    return out
