"""Contact sheets: rendered samples with their captions, for looking at a spec or a dataset."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from mosaic.audit import read_rows, read_sample_image
from mosaic.io import atomic_writer


#: most pixels of one image of a samples folder's contact sheet (1024 x 1024; a sample is its spec's size)
SHEET_PIXELS = 1024 * 1024


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType: fixed bitmap font
        return ImageFont.load_default()


#: the displayed side of a preview's tile (:func:`contact_sheet`'s default)
TILE = 160


def rendered_tiles(renderer, scenes: list, tile: int = TILE, chunk: int = 8) -> np.ndarray:
    """uint8 ``[N, tile, tile, 3]``: each scene rendered (``chunk`` at a time) and scaled to its tile at once, as
    :func:`contact_sheet` scales it (nearest neighbour). ``mosaic preview --n 400`` of a 2048 px spec held all 400
    renders (34 MB each, about 14 GB) before drawing 160 px tiles of them."""
    out = np.empty((len(scenes), tile, tile, 3), np.uint8)
    for a in range(0, len(scenes), chunk):
        images, _ = renderer.render(list(scenes[a:a + chunk]))
        for k, im in enumerate(images):
            out[a + k] = np.asarray(Image.fromarray(im).resize((tile, tile), Image.NEAREST))
    return out


def contact_sheet(images: np.ndarray, captions: list[str], out: str | Path, tile: int = TILE, cols: int | None = None,
                  title: str | None = None) -> Path:
    """Save a grid of images with a caption under each.

    Args:
        images: uint8 ``[N, H, W, 3]``.
        captions: N strings (wrapped to the tile width).
        tile: displayed tile side in pixels (images are upscaled with nearest-neighbour).
    Returns:
        The path written (PNG).
    """
    n = len(images)
    cols = cols or max(1, min(n, int(np.ceil(np.sqrt(n)))))
    rows = max(1, int(np.ceil(n / cols)))
    font = _font(12)
    wrap = max(8, tile // 7)
    wrapped = [textwrap.wrap(c, wrap)[:6] for c in captions]
    line_h = 14
    cap_h = line_h * max([len(w) for w in wrapped] + [1]) + 6
    pad = 6
    head = 24 if title else 0
    W = cols * (tile + pad) + pad
    H = head + rows * (tile + cap_h + pad) + pad
    sheet = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((pad, 5), title, fill=(0, 0, 0), font=_font(14))
    for k in range(n):
        r, c = divmod(k, cols)
        x = pad + c * (tile + pad)
        y = head + pad + r * (tile + cap_h + pad)
        sheet.paste(Image.fromarray(images[k]).resize((tile, tile), Image.NEAREST), (x, y))
        for li, line in enumerate(wrapped[k]):
            draw.text((x, y + tile + 3 + li * line_h), line, fill=(20, 20, 20), font=font)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # through a new temporary file renamed over ``out`` (mosaic.io.atomic_writer): a symlink or hard link standing at the
    # name is replaced, never written through (sheet.save(out) rewrote the file a link pointed to), a folder is named
    with atomic_writer(out) as f:
        sheet.save(f, format="PNG")
    return out


def sample_sheet(folder: str | Path, out: str | Path, n: int = 16, predictions: list[dict] | None = None,
                 tile: int = 112) -> Path | None:
    """Contact sheet of a folder of generated images with a ``metadata.jsonl`` (the generator's
    schema): one image per combination, held-out combinations first, captioned with the intended
    values and, given ``predictions`` (one dict per metadata line), what the evaluator read.
    Returns None when the folder holds no images.

    The folder may be a shared run's (``mosaic report`` makes one per trial): its ``metadata.jsonl``
    is read as a samples folder's rows (:func:`mosaic.audit.read_rows`: UTF-8 JSON objects whose
    ``file_name`` lies inside the folder) and each image as the folder's own file of at most
    :data:`SHEET_PIXELS` pixels in one of Pillow's raster formats (:func:`mosaic.audit.read_sample_image`),
    so no outside file, decompression bomb or EPS reaches the sheet.

    Raises:
        MosaicError: a damaged ``metadata.jsonl`` or image, naming the file and the line.
    """
    import json

    folder = Path(folder)
    meta_path = folder / "metadata.jsonl"
    if not meta_path.is_file():
        return None
    rows = read_rows(meta_path, "metadata file")
    lines, recs = [ln for ln, _ in rows], [r for _, r in rows]
    order = sorted(range(len(recs)), key=lambda i: (not recs[i].get("held_out"), i))
    picked, seen = [], set()
    for i in order:
        key = json.dumps(recs[i].get("combination") or recs[i].get("concepts"), sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            picked.append(i)
        if len(picked) >= n:
            break
    if not picked:
        return None
    fix = "the sheet shows only the samples folder's own images: re-sample (`mosaic sample RUN`), or move the folder out of the run"
    arrays = [read_sample_image(folder, recs[i]["file_name"], f"{meta_path} line {lines[i]}", SHEET_PIXELS, fix)[1] for i in picked]
    side = arrays[0].shape[:2]
    images = np.stack([a if a.shape[:2] == side else np.asarray(Image.fromarray(a).resize(side[::-1], Image.NEAREST))
                       for a in arrays])
    caps = []
    for i in picked:
        r = recs[i]
        cap = ("HELD-OUT " if r.get("held_out") else "seen ") + " ".join(str(v) for v in (r.get("concepts") or {}).values())
        if predictions is not None:
            p = predictions[i]
            names = list(r.get("concepts") or {}) + [c for c in p if c not in (r.get("concepts") or {})]  # the intended order
            vals = [p.get(c) for c in names if c in p]
            cap += " | read: " + ("unreadable" if vals and all(v is None for v in vals)
                                  else " ".join("?" if v is None else str(v) for v in vals))
        caps.append(cap)
    return contact_sheet(images, caps, out, tile=tile)
