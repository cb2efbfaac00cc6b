"""``mosaic audit RUN``: a person checks the evaluator's verdicts on generated images.

:func:`make_audit` draws a seeded sample of a run's scored samples (every ``predictions.jsonl``
with its ``metadata.jsonl`` under RUN: a run folder, one samples folder, or a whole sweep) and
writes ``RUN/audit/audit.html``, one self-contained page (images inlined as PNG data URIs, no
network, works from ``file://``). For each image it shows the intended values, what the evaluator
read and its verdict (right, wrong, or unreadable when the parser abstained); the person marks
each verdict **correct** or **incorrect**. Marks are kept in the browser's localStorage while
working; **Save audit.json** downloads them (a Blob link, which every browser allows from a local
file). ``mosaic audit RUN --import ~/Downloads/audit.json`` checks the file belongs to this audit
and stores it as ``RUN/audit/audit.json``, where :func:`audit_summary` (``mosaic report``,
``mosaic audit RUN --summary``) finds it: the human-agreement rate with its 95 % Wilson interval.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import stat
import time
from pathlib import Path

import numpy as np

from mosaic.audit_rows import evaluation_problem
from mosaic.errors import MosaicError
from mosaic.evaluation.agreement import wilson_interval
from mosaic.evaluation.folder import MAX_METADATA_BYTES, file_name_problem, loads_record
from mosaic.folder_kinds import transformer_run
from mosaic.foreign_names import refuse_foreign_outputs
from mosaic.io import FileReadError, atomic_write, make_output_dir, read_bounded, read_json, read_own_file
from mosaic.png import FOREIGN_FORMATS, SIGNATURE, decode_image, encode_png, pixel_digest
from mosaic.locks import FolderLock

AUDIT_DIR = "audit"
AUDIT_VERSION = 1


def find_scored_samples(root: str | Path) -> list[Path]:
    """Folders under ``root`` (itself included) holding both ``predictions.jsonl`` and
    ``metadata.jsonl`` (written by ``mosaic sample``, ``mosaic evaluate --out`` and training),
    sorted. Raises MosaicError when there is none."""
    root = Path(root)
    if not root.is_dir():
        raise MosaicError(f"{root} is not a folder: give a run folder, a samples folder or a sweep folder")
    # only mosaic's own folders are searched: a parent such as /tmp or / would mix unrelated runs into one audit
    marks = ("predictions.jsonl", "config.yaml", "sweep.yaml")
    if (root / "sampling.json").is_file() and not (root / "predictions.jsonl").is_file():  # `mosaic sample --no-score` wrote it
        raise MosaicError(f"{root} is a samples folder `mosaic sample` wrote without scores (no predictions.jsonl): score it "
                          f"(`mosaic evaluate {root} --spec RUN/dataset --out {root}`, RUN its run folder), then audit")
    if (not any((root / m).is_file() for m in marks) and not (root / "samples").is_dir()
            and not any((c / "sweep.yaml").is_file() for c in root.iterdir() if c.is_dir())):
        raise MosaicError(f"{root} is not a run, samples, sweep or reproduction folder (it holds none of {', '.join(marks)}, "
                          "samples/): give "
                          "the folder `mosaic train`, `mosaic sample`, `mosaic sweep` or `mosaic reproduce` wrote")
    found = sorted({p.parent for p in root.rglob("predictions.jsonl") if (p.parent / "metadata.jsonl").is_file()
                    and not linked_part(root, p) and not linked_part(root, p.parent / "metadata.jsonl")})  # never another folder's rows
    if not found and transformer_run(root):
        raise MosaicError(f"{root} is a transformer run: it makes no images to audit (its results are its metrics.json, measured "
                          "on its test splits); `mosaic audit` checks a diffusion run's scored samples")
    if not found:
        raise MosaicError(f"{root} holds no scored samples (a folder with predictions.jsonl and metadata.jsonl): "
                          "sample and score the run first (`mosaic sample RUN`)")
    for folder in found:  # an evaluation interrupted there: its files are of two evaluations (attack round 23)
        if not (folder / "metrics.json").is_file():  # nothing says the rows are one whole evaluation (attack round 27)
            raise MosaicError([(str(folder / "metrics.json"), "is missing: every evaluation writes it last, so nothing says the "
                                "predictions beside it are one whole evaluation's; rerun `mosaic evaluate ... --out` (or "
                                "`mosaic sample RUN`) to score that folder, then audit")])
        try:
            status = read_json(folder / "metrics.json").get("status")
        except (OSError, ValueError, AttributeError):
            status = None
        if status == "incomplete":
            raise MosaicError([(str(folder / "metrics.json"), "says an evaluation was writing this folder and did not finish: its "
                                "predictions are not one evaluation's; rerun that `mosaic evaluate ... --out`, then audit")])
    return found


#: most bytes an image shown on the audit page may hold (a sample is a few KB; the page inlines every image)
MAX_AUDIT_IMAGE_BYTES = 16 << 20
#: most pixels an image shown on the audit page may have (4096 x 4096): a decompression bomb is refused unread
MAX_AUDIT_PIXELS = 4096 * 4096


def read_rows(path: Path, what: str = "predictions file") -> list[tuple[int, dict]]:
    """The rows of a samples folder's ``predictions.jsonl`` (or ``metadata.jsonl``: ``what``) with
    their line numbers, each checked to be a row: a JSON object whose ``file_name`` names a file inside the folder
    (:func:`mosaic.evaluation.folder.file_name_problem`) and whose ``intended``/``read`` are
    mappings (``concepts`` too, in a ``metadata.jsonl``), ``reasons`` a list, ``held_out``/``correct`` booleans (each may be missing).

    Raises:
        MosaicError: too large, not UTF-8, not JSON, nested too deep, or a row of the wrong shape,
            naming the file and the line.
    """
    fix = "re-score the samples (`mosaic sample RUN`), or move the damaged folder out of the run"
    try:
        data = read_bounded(path, MAX_METADATA_BYTES)  # a regular file (a FIFO is never waited on), bounded
    except FileReadError as e:
        raise MosaicError(f"{path} is {e}: not a {what}; {fix}") from None
    except OSError as e:
        raise MosaicError(f"{path} cannot be read ({e.strerror or e}): {fix}") from None
    rows = []
    for ln, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{path} line {ln}"
        try:
            r = loads_record(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise MosaicError([(where, f"not UTF-8 text ({e.reason} at byte {e.start}); {fix}")]) from None
        except RecursionError:
            raise MosaicError([(where, f"nested too deep to be a prediction row; {fix}")]) from None
        except ValueError as e:
            raise MosaicError([(where, f"not valid JSON ({str(e)[:100]}); {fix}")]) from None
        if not isinstance(r, dict):
            raise MosaicError([(where, f"a {type(r).__name__}, not a prediction row (a JSON object); {fix}")])
        problem = file_name_problem(r.get("file_name"))
        if problem:
            raise MosaicError([(where, f"file_name {str(r.get('file_name'))[:80]!r} {problem}; {fix}")])
        for key, kinds, what in (("intended", dict, "a mapping"), ("read", dict, "a mapping"), ("concepts", dict, "a mapping"), ("reasons", list, "a list"),
                                 ("held_out", bool, "a boolean"), ("correct", bool, "a boolean")):
            if r.get(key) is not None and not isinstance(r[key], kinds):
                raise MosaicError([(where, f"{key} = {str(r[key])[:40]!r} ({type(r[key]).__name__}) must be {what}; {fix}")])
        if isinstance(r.get("correct"), bool) and isinstance(r.get("intended"), dict) and isinstance(r.get("read"), dict) and \
                r["correct"] != all(r["read"].get(c) == v for c, v in r["intended"].items()):  # the verdict is a function of the row
            raise MosaicError([(where, f"correct = {str(r['correct']).lower()} contradicts the row's own read and intended values "
                                       f"(the evaluator's verdict is whether every concept was read as intended); {fix}")])
        rows.append((ln, r))
    return rows


def _audit_image(folder: Path, row: dict, where: str) -> str:
    """The data URI of the image a prediction row scored (:func:`read_sample_image`): its pixels must be the ones the
    row's ``image_sha256`` records (:func:`mosaic.png.pixel_digest`), else the page would show a verdict beside another
    image (two images swapped after scoring, attack round 27).

    Raises:
        MosaicError: the row records no digest (scored by a mosaic before 2026-12-06) or another image's."""
    data, arr = read_sample_image(folder, row["file_name"], where)
    fix = "score the folder again (`mosaic evaluate DIR --spec SPEC --out DIR`, or `mosaic sample RUN`), then audit"
    if not isinstance(row.get("image_sha256"), str):
        raise MosaicError([(where, f"the row records no image_sha256 (the digest of the image it scored), so nothing ties its verdict "
                                   f"to image {row['file_name']!r}; {fix}")])
    if pixel_digest(arr) != row["image_sha256"]:
        raise MosaicError([(where, f"image {row['file_name']!r} is not the image this row scored (its pixels' digest differs from the "
                                   f"row's image_sha256: replaced or swapped since); {fix}")])
    png = data if data.startswith(SIGNATURE) else encode_png(arr)  # what the page shows is an image that decoded
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def read_sample_image(folder: Path, name: str, where: str, max_pixels: int = MAX_AUDIT_PIXELS,
                      fix: str = "the audit shows only the samples folder's own images; re-score the samples (`mosaic sample RUN`)"
                      ) -> tuple[bytes, np.ndarray]:
    """The bytes and RGB pixels of the image ``name`` of a samples folder: it must lie inside ``folder`` once
    every link is resolved, be a regular file with one name (:func:`mosaic.io.read_own_file`),
    hold at most :data:`MAX_AUDIT_IMAGE_BYTES` and decode as an image of at most
    ``max_pixels`` (the header is read first; Pillow's own raster formats only). Nothing outside a
    run is ever copied into a page or a contact sheet someone shares (the audit, ``mosaic report``).

    Raises:
        MosaicError: naming the line of ``predictions.jsonl`` and why.
    """
    path = folder / name
    base = os.path.realpath(folder)
    real = os.path.realpath(path)
    if os.path.commonpath([base, real]) != base:
        raise MosaicError([(where, f"image {name!r} resolves to {real}, outside the samples folder {folder} (a link): {fix}")])
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise MosaicError([(where, f"image {path} is not a regular file (a link, folder, device or FIFO): {fix}")])
        if st.st_size > MAX_AUDIT_IMAGE_BYTES:
            raise MosaicError([(where, f"image {path} holds more than {MAX_AUDIT_IMAGE_BYTES:,} bytes: not a sample; {fix}")])
        data = read_own_file(path)
    except FileNotFoundError:
        raise MosaicError([(where, f"image {path} is missing")]) from None
    except OSError as e:
        raise MosaicError([(where, f"image {path} cannot be read as the folder's own file ({e.strerror or e}): {fix}")]) from None
    if len(data) > MAX_AUDIT_IMAGE_BYTES:
        raise MosaicError([(where, f"image {path} holds more than {MAX_AUDIT_IMAGE_BYTES:,} bytes: not a sample; {fix}")])
    return data, decode_image(data, where=f"{where}: image {path}", error=MosaicError, max_pixels=max_pixels, formats=FOREIGN_FORMATS)


def verdict_of(row: dict) -> str:
    """``right`` (every concept read as intended), ``unreadable`` (a concept read as None: the
    evaluator could not read it, or abstained) or ``wrong``."""
    if row.get("correct"):
        return "right"
    read = row.get("read") or {}
    return "unreadable" if any(v is None for v in read.values()) else "wrong"


def collect_items(root: str | Path, n: int = 100, seed: int = 0) -> list[dict]:
    """A seeded sample of ``n`` scored images under ``root`` (all of them when fewer): per image
    ``id``, ``source`` (its samples folder, relative to ``root``), ``file_name``, ``held_out``,
    ``intended``, ``read``, ``verdict`` (:func:`verdict_of`) and ``reasons``."""
    root = Path(root)
    pool = []
    for folder in find_scored_samples(root):
        rows = read_rows(folder / "predictions.jsonl")
        try:
            metrics = read_json(folder / "metrics.json")
        except (OSError, ValueError) as e:
            raise MosaicError([(str(folder / "metrics.json"), f"cannot be read ({str(e)[:100]}): rerun that evaluation, then audit")]) from None
        why = evaluation_problem(rows, read_rows(folder / "metadata.jsonl", "metadata file"), metrics)
        if why is not None:  # the rows are not one whole evaluation: never shown as the evaluator's verdicts (attack round 29)
            line, _, rest = why.partition(": ") if why.startswith("line ") else ("", "", why)
            raise MosaicError([(f"{folder / 'predictions.jsonl'}{' ' + line if line else ''}", f"{rest}; score the folder again (`mosaic evaluate DIR --spec SPEC "
                                                                  "--out DIR`, or `mosaic sample RUN`), then audit")])
        rel = "." if folder == root else str(folder.relative_to(root))
        for ln, r in rows:
            pool.append((rel, folder, ln, r))
    rng = np.random.default_rng(seed)
    take = sorted(rng.choice(len(pool), size=min(n, len(pool)), replace=False).tolist())
    items = []
    for k, i in enumerate(take):
        rel, folder, ln, r = pool[i]
        image = _audit_image(folder, r, f"{folder / 'predictions.jsonl'} line {ln}")
        items.append({"id": k, "source": rel, "file_name": r.get("file_name"), "held_out": bool(r.get("held_out")),
                      "intended": r.get("intended") or {}, "read": r.get("read") or {}, "verdict": verdict_of(r),
                      "reasons": list(r.get("reasons") or []), "image": image})
    return items


def audit_id(items: list[dict], seed: int) -> str:
    """A short id of an audit: the sha256 of its seed and (source, file_name) list."""
    key = json.dumps([seed] + [[it["source"], it["file_name"]] for it in items])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def script_json(data) -> str:
    """JSON for a ``<script type="application/json">`` block: ``<``, ``>`` and ``&`` written as
    ``\\u003c``, ``\\u003e``, ``\\u0026`` (the same JSON to ``JSON.parse``), so no text in the data,
    ``</script>``, ``<!--`` or ``<script`` included, can end the block or change how it is parsed
    (HTML's script data states)."""
    return json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def audit_page(items: list[dict], meta: dict, marks: dict | None = None) -> str:
    """The audit page's HTML (self-contained).

    Args:
        items: :func:`collect_items`.
        meta: ``{"audit_id", "run", "seed", "n", "created"}``, embedded and written back in
            ``audit.json``.
        marks: previous marks ``{item id: {"mark": "correct" | "incorrect", "note": str}}`` (a
            re-made page keeps them).
    Returns:
        the page as a string. Its data (items, meta, marks) is one JSON block, ``<script
        type="application/json" id="audit-data">``; the JSON saved by the page is
        ``{"version", "audit_id", "run", "seed", "saved", "marks": [{"id", "source", "file_name",
        "verdict", "mark", "note"}]}``.
    """
    # the browser keeps unsaved marks under a key of the audit and of the verdicts it shows: a page made again after the
    # samples were scored again (other verdicts) never restores marks given on the old ones
    verdicts = hashlib.sha256(json.dumps([it.get("verdict") for it in items]).encode()).hexdigest()[:12]
    data = {"version": AUDIT_VERSION, "meta": meta, "items": items, "marks": {str(k): v for k, v in (marks or {}).items()},
            "store": f"mosaic-audit-{meta.get('audit_id')}-{verdicts}"}
    blob = script_json(data)
    title = f"mosaic audit: {meta.get('run', '')}"
    return _PAGE.replace("%%TITLE%%", html.escape(title)).replace("%%DATA%%", blob)


def make_audit(root: str | Path, n: int = 100, seed: int = 0, out: str | Path | None = None) -> Path:
    """Write the audit page for ``root`` (a run, a samples folder or a sweep): ``out`` (default
    ``root/audit``) ``/audit.html``, keeping the marks of an ``audit.json`` already there when
    its audit id matches. Returns the page's path.

    Raises:
        MosaicError: no scored samples under ``root``; ``n`` < 1; ``seed`` not an integer >= 0.
    """
    if n < 1:
        raise MosaicError(f"--n {n}: an audit needs at least 1 image (100 is the default)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise MosaicError(f"--seed {seed!r}: the seed of an audit's sample is an integer >= 0 (0 is the default)")
    root = Path(root)
    items = collect_items(root, n=n, seed=seed)
    aid = audit_id(items, seed)
    out = Path(out) if out is not None else root / AUDIT_DIR

    with FolderLock(out, MosaicError, "audit folder", wait=False):  # one writer of the audit folder at a time
        return _write_audit(root, out, items, aid, seed)


def _write_audit(root: Path, out: Path, items: list[dict], aid: str, seed: int) -> Path:
    if out.is_symlink():
        raise MosaicError(f"{out} is a symbolic link: the audit is never written through a link; give a real folder (--out)")
    make_output_dir(out, "--out")
    # a person's items.json or page in the folder is never overwritten (a new audit replaces its own files)
    refuse_foreign_outputs(out, ("items.json", "audit.html"), "items.json", _is_audit_items, "mosaic audit", "an audit")
    marks = {}
    saved = out / "audit.json"
    if saved.is_file():
        # the marks of an earlier save of this audit are kept; a damaged or foreign audit.json keeps none (it is left
        # in place, never read as marks): any JSON shape, non-UTF-8 bytes or nesting too deep
        try:
            old = read_json(saved)  # a regular file of at most MAX_JSON_BYTES (mosaic.io.read_bounded)
            if isinstance(old, dict) and old.get("audit_id") == aid and isinstance(old.get("marks"), list):
                # a mark is kept only on the verdict it was given on: samples scored again since (another evaluator)
                # have other verdicts, and "correct" on "right" is no agreement with "wrong" (attack round 21)
                now = {it["id"]: it["verdict"] for it in items}
                marks = {m["id"]: {"mark": m.get("mark"), "note": m.get("note", "") if isinstance(m.get("note", ""), str) else ""}
                         for m in old["marks"] if isinstance(m, dict) and type(m.get("id")) is int and m.get("mark") in ("correct", "incorrect")
                         and m.get("verdict") is not None and m.get("verdict") == now.get(m["id"])}
        except (ValueError, KeyError, TypeError, RecursionError, OSError):
            marks = {}
    meta = {"audit_id": aid, "run": str(root), "seed": seed, "n": len(items), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    page = out / "audit.html"
    atomic_write(out / "items.json", json.dumps({"meta": meta, "items": [{k: v for k, v in it.items() if k != "image"} for it in items]},
                                                indent=1) + "\n")
    atomic_write(page, audit_page(items, meta, marks))
    return page


def _is_audit_items(data) -> bool:
    """``items.json`` as mosaic audit writes it (``meta.audit_id`` and an ``items`` list)."""
    return isinstance(data, dict) and isinstance(data.get("meta"), dict) and "audit_id" in data["meta"] and isinstance(data.get("items"), list)


def check_audit(data: dict, expected_id: str | None = None, where: str = "audit.json", items: list[dict] | None = None) -> list[dict]:
    """Validate a saved audit; returns its marks.

    With ``items`` (the audit's own, from ``items.json``), every mark must name one of them (its
    ``id``, ``source`` and ``file_name``) and each at most once, and a mark that states a
    ``verdict`` must state the audit's own for that item: invented or repeated ids, and verdicts
    the evaluator never gave, never count towards the agreement rate.

    Raises:
        MosaicError: not an audit (names the missing field), a mark that is neither ``correct``
            nor ``incorrect``, an audit id other than ``expected_id`` (a file from another audit),
            a mark of an item the audit does not have, a mark whose stated verdict is not the audit's
            own for that item, or an item marked twice.
    """
    if not isinstance(data, dict) or "audit_id" not in data or not isinstance(data.get("marks"), list):
        raise MosaicError(f"{where} is not a saved mosaic audit: it needs 'audit_id' and a 'marks' list (save it from audit.html)")
    if expected_id is not None and data["audit_id"] != expected_id:
        raise MosaicError(f"{where} belongs to audit {data['audit_id']}, not {expected_id}: save it from this run's audit.html "
                          "(or re-make the page with the same --n and --seed)")
    for k, m in enumerate(data["marks"]):
        if not isinstance(m, dict) or m.get("mark") not in ("correct", "incorrect", None):
            raise MosaicError(f"{where} marks[{k}].mark = {str(m.get('mark') if isinstance(m, dict) else m)[:60]!r}: use 'correct' or 'incorrect'")
    if items is not None:
        own = {it.get("id"): it for it in items if isinstance(it, dict)}
        seen: set = set()
        for k, m in enumerate(data["marks"]):
            i = m.get("id")
            it = own.get(i) if isinstance(i, int) and not isinstance(i, bool) else None
            if it is None:
                raise MosaicError(f"{where} marks[{k}].id = {str(i)[:40]!r} is not an item of this audit (ids 0..{len(own) - 1}): "
                                  "save the file from this audit's page; a mark of an item it does not have never counts")
            if (m.get("source"), m.get("file_name")) != (it.get("source"), it.get("file_name")):
                raise MosaicError(f"{where} marks[{k}] (id {i}) names {str(m.get('file_name'))[:80]!r}, but item {i} of this audit is "
                                  f"{it.get('file_name')!r}: save the file from this audit's page")
            if "verdict" in m and m["verdict"] != it.get("verdict"):
                raise MosaicError(f"{where} marks[{k}] (id {i}) states the verdict {str(m['verdict'])[:40]!r}, but the evaluator's "
                                  f"verdict of item {i} in this audit is {it.get('verdict')!r}: the verdicts are the audit's own "
                                  "(items.json); save the file from this audit's page")
            if i in seen:
                raise MosaicError(f"{where} marks item {i} twice: each item counts once; save the file from this audit's page")
            seen.add(i)
        if len(data["marks"]) > len(own):
            raise MosaicError(f"{where} holds {len(data['marks'])} marks for an audit of {len(own)} items")
    return data["marks"]


def _read_json(path: Path, what: str):
    """A JSON file of an audit folder, or MosaicError naming it (missing, not UTF-8, not JSON, too deep)."""
    try:
        return read_json(path)
    except FileNotFoundError:
        raise MosaicError(f"{path} is missing: {what}") from None
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
        raise MosaicError(f"{path} cannot be read as JSON ({type(e).__name__}: {str(e)[:100]}): {what}") from None


def _audit_items(out: Path) -> tuple[str, list[dict]]:
    """The audit id and items of the audit page in ``out`` (``items.json``)."""
    data = _read_json(out / "items.json", f"re-make the audit page with `mosaic audit` (it writes {out / 'items.json'})")
    try:
        aid, items = str(data["meta"]["audit_id"]), list(data["items"])
    except (KeyError, TypeError):
        raise MosaicError(f"{out / 'items.json'} is damaged (no meta.audit_id or items): re-make the audit page with `mosaic audit`") from None
    # every item as the page wrote it: a mapping whose id is a whole number, source and file_name strings
    bad = next((k for k, it in enumerate(items) if not isinstance(it, dict) or type(it.get("id")) is not int
                or not isinstance(it.get("source"), str) or not isinstance(it.get("file_name"), str)), None)
    if bad is not None:
        raise MosaicError(f"{out / 'items.json'} is damaged (item {bad} is not an item with an integer id, source and file_name): "
                          "re-make the audit page with `mosaic audit`")
    _check_items(out, aid, items, data["meta"])
    return aid, items


def _check_items(out: Path, aid: str, items: list[dict], meta: dict) -> None:
    """``items.json``'s items must be the audit's own sample (attack round 19: 1,000 invented items, or
    every verdict edited to "right", were counted as agreement): their ids 0..n-1 in order, the audit id
    recomputed from the seed and the (source, file_name) list (:func:`audit_id`), and each item's
    ``verdict`` the evaluator's verdict of its row in the run's ``predictions.jsonl`` (:func:`verdict_of`),
    the run being the folder the audit folder lies in (``RUN/audit``) or, for an ``--out`` elsewhere,
    ``meta.run``.

    Raises:
        MosaicError: naming ``items.json``, the first item that is not the audit's, and the fix."""
    where, fix = out / "items.json", "re-make the audit page with `mosaic audit RUN` (the marks of its audit.json are kept)"
    seed = meta.get("seed")
    if [it["id"] for it in items] != list(range(len(items))) or type(seed) is not int or audit_id(items, seed) != aid:
        raise MosaicError(f"{where} is not the sample of audit {aid[:40]!r} (its ids, seed or images were changed): {fix}")
    roots = [out.parent] + ([Path(meta["run"])] if isinstance(meta.get("run"), str) and meta["run"] else [])
    rows: dict[str, dict] = {}
    for it in items:
        if it["source"] not in rows:
            found = next((r / it["source"] / "predictions.jsonl" for r in roots
                          if ".." not in Path(it["source"]).parts and not Path(it["source"]).is_absolute()
                          and (r / it["source"] / "predictions.jsonl").is_file()), None)
            if found is None:
                raise MosaicError(f"{where}: item {it['id']}'s samples folder {it['source']!r} holds no predictions.jsonl beside the "
                                  f"audit, so its verdicts cannot be checked: {fix}")
            rows[it["source"]] = {r.get("file_name"): r for _, r in read_rows(found)}
        row = rows[it["source"]].get(it["file_name"])
        if row is None or it.get("verdict") != verdict_of(row):
            got = "no such scored image" if row is None else f"the evaluator's verdict is {verdict_of(row)!r}"
            raise MosaicError(f"{where}: item {it['id']} ({it['source']}/{it['file_name']}) says verdict {str(it.get('verdict'))[:20]!r}, "
                              f"but {got}: the items were edited; {fix}")


def import_audit(root: str | Path, file: str | Path, out: str | Path | None = None) -> Path:
    """Store a downloaded ``audit.json`` as ``root/audit/audit.json`` after checking it belongs to
    the audit page there. Returns the stored path.

    Raises:
        MosaicError: no audit page under ``root`` (make it first), an unreadable file, or a file of
            another audit.
    """

    out = Path(out) if out is not None else Path(root) / AUDIT_DIR
    if out.is_symlink():  # as the page's writer: the marks are never written through a link into another folder
        raise MosaicError(f"{out} is a symbolic link: an audit's marks are never written through a link; "
                          f"make the audit page in a real folder (`mosaic audit {root}`) and import there")
    items_file = out / "items.json"
    if not items_file.is_file():
        raise MosaicError(f"{out} holds no audit (items.json is missing): run `mosaic audit {root}` first")
    expected, items = _audit_items(out)
    data = _read_json(Path(file), "give the audit.json the page saved")
    check_audit(data, expected, where=str(file), items=items)
    with FolderLock(out, MosaicError, "audit folder", wait=False):
        return atomic_write(out / "audit.json", json.dumps(data, indent=1) + "\n")


def audit_summary(path: str | Path) -> dict:
    """The human-agreement rate of a saved audit.

    Returns:
        ``{"path", "audit_id", "n" (items), "marked", "agree" (verdicts marked correct),
        "rate" (agree / marked, None when nothing is marked), "interval" ([low, high]: 95 %
        Wilson score interval), "by_verdict": {verdict: {"marked", "agree"}}}``.
    Raises:
        MosaicError: an invalid audit file; no ``items.json`` beside it, or one of another audit
            (the marks could not be checked against the audit's items, so none is counted).
    """

    p = Path(path)
    data = _read_json(p, "import the audit again with `mosaic audit RUN --import audit.json`")
    if not (p.parent / "items.json").is_file():  # marks are counted only against the audit's own items
        raise MosaicError(f"{p} has no items.json beside it (the audit page's items): its marks cannot be checked, so they are "
                          "not counted; re-make the audit page with `mosaic audit RUN` and import the file there (--import)")
    aid, items = _audit_items(p.parent)
    if isinstance(data, dict) and str(data.get("audit_id")) != aid:
        raise MosaicError(f"{p} is the file of audit {str(data.get('audit_id'))[:40]!r}, but the page beside it is audit {aid!r}: "
                          "import the file into the audit it was saved from")
    marks = check_audit(data, where=str(p), items=items)
    done = [m for m in marks if m.get("mark")]
    agree = sum(m["mark"] == "correct" for m in done)
    verdicts = {it.get("id"): it.get("verdict") for it in items or [] if isinstance(it, dict)}
    by: dict = {}
    for m in done:
        # the verdict is the audit's own (items.json), never what the mark claims
        verdict = verdicts.get(m.get("id"), "?")
        b = by.setdefault(str(verdict), {"marked": 0, "agree": 0})
        b["marked"] += 1
        b["agree"] += m["mark"] == "correct"
    iv = wilson_interval(agree, len(done))
    return {"path": str(p), "audit_id": data["audit_id"], "n": len(marks), "marked": len(done), "agree": agree,
            "rate": agree / len(done) if done else None, "interval": list(iv) if iv else None, "by_verdict": by}


def find_audit_files(root: str | Path) -> list[Path]:
    """Every saved ``audit/audit.json`` under ``root`` (itself included), sorted; one reached through a
    symbolic link (a linked ``audit/``: another sweep's audit) is not this folder's and is left out."""
    return sorted(p for p in Path(root).rglob(f"{AUDIT_DIR}/audit.json") if not linked_part(Path(root), p))


def linked_part(root: Path, p: Path) -> Path | None:
    """The first of ``p`` (found under ``root``) and the folders between them that is a symbolic link, or None."""
    node = root
    for part in p.relative_to(root).parts:
        node = node / part
        if node.is_symlink():
            return node
    return None


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>%%TITLE%%</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px;background:#fafafa}
header{position:sticky;top:0;background:#fafafa;padding:6px 0;border-bottom:1px solid #ccc;z-index:2}
.grid{display:flex;flex-wrap:wrap;gap:10px;margin-top:10px}
.card{background:#fff;border:2px solid #ddd;border-radius:6px;padding:8px;width:230px;font-size:12px}
.card.correct{border-color:#2a2}.card.incorrect{border-color:#c22}
.card img{width:128px;height:128px;image-rendering:pixelated;display:block;margin:0 auto 6px}
.v-right{color:#161}.v-wrong{color:#a11}.v-unreadable{color:#a60}
.reasons{color:#666;max-height:4.5em;overflow:auto}
button{cursor:pointer;margin:2px}button.on{font-weight:bold;outline:2px solid #333}
table{border-collapse:collapse}td{padding:0 4px 0 0;vertical-align:top}
</style></head><body>
<header>
<b>%%TITLE%%</b> &mdash; <span id="progress"></span>
<button id="save">Save audit.json</button> <a id="download" style="display:none">download audit.json</a>
<div style="font-size:12px;color:#555">For each image, is the evaluator's <b>verdict</b> right? Mark
<b>correct</b> when a careful person would read the image the same way (a blob credited as a shape, or a
clean shape called wrong, is <b>incorrect</b>). Marks are kept in this browser; <b>Save audit.json</b>
downloads them, then run <code>mosaic audit RUN --import audit.json</code>.</div>
</header>
<div class="grid" id="grid"></div>
<script type="application/json" id="audit-data">%%DATA%%</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("audit-data").textContent);
const KEY = DATA.store || ("mosaic-audit-" + DATA.meta.audit_id);
let marks = Object.assign({}, DATA.marks);
try { Object.assign(marks, JSON.parse(localStorage.getItem(KEY) || "{}")); } catch (e) {}
function esc(s) { return String(s).replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;","'":"&#39;"}[c])); }
function fmt(v) { return v === null || v === undefined ? "<i>unreadable</i>" : esc(v); }
function persist() { try { localStorage.setItem(KEY, JSON.stringify(marks)); } catch (e) {} update(); }
function update() {
  const n = DATA.items.length, done = DATA.items.filter(it => marks[it.id] && marks[it.id].mark).length;
  const agree = DATA.items.filter(it => marks[it.id] && marks[it.id].mark === "correct").length;
  document.getElementById("progress").textContent = done + " of " + n + " marked, " + agree + " verdicts correct";
  for (const it of DATA.items) {
    const card = document.getElementById("item-" + it.id), m = (marks[it.id] || {}).mark;
    card.className = "card" + (m ? " " + m : "");
    card.querySelector(".b-correct").classList.toggle("on", m === "correct");
    card.querySelector(".b-incorrect").classList.toggle("on", m === "incorrect");
  }
}
function mark(id, value) { marks[id] = Object.assign({}, marks[id] || {}, {mark: value}); persist(); }
function build() {
  const grid = document.getElementById("grid");
  for (const it of DATA.items) {
    const rows = Object.keys(it.intended).map(c =>
      "<tr><td>" + esc(c) + "</td><td>" + fmt(it.intended[c]) + "</td><td>" + fmt(it.read[c]) + "</td></tr>").join("");
    const div = document.createElement("div");
    div.id = "item-" + it.id; div.className = "card";
    div.innerHTML = "<img alt='sample' src='" + it.image + "'>" +
      "<div><b>#" + it.id + "</b> " + esc(it.file_name) + (it.held_out ? " (held-out)" : " (seen)") + "</div>" +
      "<table><tr><td></td><td><b>intended</b></td><td><b>read</b></td></tr>" + rows + "</table>" +
      "<div>verdict: <b class='v-" + it.verdict + "'>" + it.verdict + "</b></div>" +
      "<div class='reasons'>" + it.reasons.map(esc).join("<br>") + "</div>" +
      "<button class='b-correct'>verdict correct</button><button class='b-incorrect'>verdict incorrect</button>" +
      "<input class='note' placeholder='note' style='width:95%'>";
    div.querySelector(".b-correct").onclick = () => mark(it.id, "correct");
    div.querySelector(".b-incorrect").onclick = () => mark(it.id, "incorrect");
    const note = div.querySelector(".note");
    note.value = (marks[it.id] || {}).note || "";
    note.onchange = () => { marks[it.id] = Object.assign({}, marks[it.id] || {}, {note: note.value}); persist(); };
    grid.appendChild(div);
  }
}
function audit() {
  return {version: DATA.version, audit_id: DATA.meta.audit_id, run: DATA.meta.run, seed: DATA.meta.seed,
          saved: new Date().toISOString(),
          marks: DATA.items.map(it => ({id: it.id, source: it.source, file_name: it.file_name, verdict: it.verdict,
                                        mark: (marks[it.id] || {}).mark || null, note: (marks[it.id] || {}).note || ""}))};
}
document.getElementById("save").onclick = () => {
  const blob = new Blob([JSON.stringify(audit(), null, 1)], {type: "application/json"});
  const a = document.getElementById("download");
  if (a.href) URL.revokeObjectURL(a.href);
  a.href = URL.createObjectURL(blob); a.download = "audit.json"; a.style.display = "inline";
  a.click();
};
build(); update();
</script></body></html>
"""
