"""PNG encoding of rendered images, about 4x faster than Pillow's ``Image.save`` at 64 px.

A PNG is a signature, an ``IHDR`` chunk, ``IDAT`` chunks holding the zlib stream of the filtered
scanlines, and ``IEND`` (W3C PNG specification, 2nd edition, sections 5, 9 and 11). Rendered
images are small and flat (a few filled shapes on a plain background), so filter type 0 (none) and
zlib level 1 compress them well: smaller files than Pillow's ``compress_level=1`` with its adaptive
filters, for a quarter of the time, because the whole encoder is one ``zlib.compress`` call on a
numpy buffer (Pillow's per-call overhead dominates at this size). The bytes are a pure function of
the pixels and zlib's level-1 output (zlib is part of CPython's build; the manifest records the
zlib version). Any PNG decoder reads them; ``tests/test_png.py`` checks Pillow decodes the same
pixels.
"""

from __future__ import annotations

import hashlib
import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
ZLIB_LEVEL = 1
_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


def _kind_name(kind: bytes) -> str:
    """A chunk type as a message shows it: quoted, any byte outside printable ASCII escaped
    (``'IDAT'``, ``'\\x1b[2J'``), so a hostile file's control bytes never reach a terminal."""
    return ascii(kind.decode("latin-1"))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(array: np.ndarray, level: int = ZLIB_LEVEL) -> bytes:
    """PNG bytes of a uint8 image: ``[H, W, 3]`` (RGB, colour type 2) or ``[H, W]`` (greyscale,
    colour type 0), 8 bits per sample, no interlace, filter type 0 on every scanline.

    Raises:
        ValueError: another dtype or shape.
    """
    a = np.ascontiguousarray(array)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ValueError(f"encode_png takes uint8 [H, W, 3] or [H, W], got {a.dtype} {list(a.shape)}")
    h, w = a.shape[:2]
    rows = np.empty((h, 1 + a[0].size), np.uint8)
    rows[:, 0] = 0  # filter type 0 (none) for each scanline
    rows[:, 1:] = a.reshape(h, -1)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2 if a.ndim == 3 else 0, 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)) + _IEND


#: bytes of a PNG's signature and whole ``IHDR`` chunk (8 + length 4 + type 4 + 13 data bytes):
#: what :func:`png_header_problem` reads of a file.
HEADER_BYTES = 29

#: (bit depth, colour type) of each kind of file in a dataset, as :func:`encode_png` writes them.
_DATASET_FORMAT = {"image": (8, 2), "mask": (8, 0)}
#: samples a pixel of a dataset's image (RGB) and mask (greyscale)
_CHANNELS = {"image": 3, "mask": 1}
_COLOUR_TYPES = {0: "greyscale", 2: "RGB", 3: "palette", 4: "greyscale + alpha", 6: "RGBA"}


def png_size(head: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels from a PNG's first 24 bytes (the signature and the ``IHDR``
    chunk's length, type, width and height: PNG specification, 2nd edition, 11.2.2), or None where
    they are not a PNG's. Reads no pixel data, so a decompression bomb costs nothing to size."""
    if len(head) < 24 or head[:8] != SIGNATURE or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def _format_name(depth: int, colour: int) -> str:
    return f"{depth}-bit {_COLOUR_TYPES.get(colour, 'unknown')} (colour type {colour})"


def png_header_problem(head: bytes, size: int, kind: str = "image") -> str | None:
    """None when ``head`` (a file's first :data:`HEADER_BYTES` bytes) opens a PNG of ``size`` x
    ``size`` pixels in the format mosaic writes for ``kind`` (``"image"``: 8-bit RGB, colour type 2;
    ``"mask"``: 8-bit greyscale, colour type 0; no interlace), else what is wrong, for a dataset
    whose spec has ``image.size: size``. A file of the right size in another format (RGBA, palette,
    16-bit, interlaced) was not written by mosaic: read anyway, it would be converted silently."""
    wh = png_size(head)
    if wh is None:
        return "not a PNG (no signature and IHDR chunk)"
    if wh != (size, size):
        return _other_size(*wh, size)
    if len(head) < HEADER_BYTES:
        return "truncated inside its IHDR chunk"
    depth, colour, compression, filter_method, interlace = head[24:29]
    want = _DATASET_FORMAT[kind]
    if compression or filter_method:  # PNG defines only method 0 of each; decoders differ on others (Pillow ignores one, libpng refuses)
        return (f"its IHDR gives compression method {compression} and filter method {filter_method}; PNG defines only 0, "
                "which mosaic writes: the file was replaced or damaged")
    if (depth, colour) != want:
        return (f"{_format_name(depth, colour)}, but a dataset's {kind}s are {_format_name(*want)}, as mosaic writes "
                "them: the file was replaced or converted")
    if interlace:
        return f"interlaced (Adam7), but mosaic writes its {kind}s without interlace: the file was replaced or converted"
    return None


def max_png_bytes(size: int, kind: str = "image") -> int:
    """The most bytes a PNG mosaic writes for a ``size`` x ``size`` ``kind`` can take: twice its
    raw scanlines (zlib's stored blocks add 5 bytes per 16 KB) plus 4 KB for the chunks. A file
    larger than this is refused before it is read whole."""
    channels = _CHANNELS[kind]
    return 2 * size * (1 + size * channels) + 4096


def png_structure_problem(data: bytes, size: int, kind: str = "image") -> str | None:
    """None when ``data`` is a whole PNG in the form mosaic writes a ``size`` x ``size`` ``kind``
    (``"image"`` or ``"mask"``), else what is wrong. The form (what :func:`encode_png` writes, and
    Pillow's plain ``save`` of version-1 datasets): the signature; one ``IHDR`` of 13 bytes with this
    size, bit depth 8, colour type 2 (image) or 0 (mask), compression, filter and interlace 0; then
    ``IDAT`` chunks only, one after another; then an empty ``IEND`` and nothing after it; every
    chunk's CRC right; the ``IDAT`` zlib stream complete, decompressing to exactly ``size`` scanlines
    of ``1 + size x channels`` bytes, each filter byte 0-4. Any other chunk (a second ``IHDR``,
    ``eXIf`` or ``tEXt`` orientation, ``tRNS``, ``PLTE``, ``gAMA``, ``iCCP``, APNG frames) is refused:
    decoders differ on them (Pillow takes the last ``IHDR``; HF ``datasets`` applies EXIF
    orientation), so the pixels a reader gets would depend on the reader. Cost: one pass over the
    chunks and one ``zlib`` decompression of at most ``size * (1 + 3 size)`` bytes."""
    if (why := png_header_problem(data[:HEADER_BYTES], size, kind)) is not None:
        return why
    if len(data) > max_png_bytes(size, kind):
        return f"{len(data):,} bytes, more than a {size}x{size} {kind} PNG mosaic writes can take: the file was replaced"
    pos, chunks, idat = 8, [], []
    while pos < len(data):
        if pos + 12 > len(data):
            return f"truncated inside a chunk at byte {pos}"
        n, kind_b = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if len(body) != n or pos + 12 + n > len(data):
            return f"truncated inside its {_kind_name(kind_b)} chunk at byte {pos}"
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if crc != zlib.crc32(kind_b + body):
            return f"the CRC of its {_kind_name(kind_b)} chunk at byte {pos} is wrong: the file is damaged"
        chunks.append((kind_b, n))
        if kind_b == b"IDAT":
            idat.append(body)
        pos += 12 + n
        if kind_b == b"IEND":
            break
    names = [c for c, _ in chunks]
    if not names or names[0] != b"IHDR" or chunks[0][1] != 13:
        return "its first chunk is not a 13-byte IHDR"
    if names[-1] != b"IEND" or chunks[-1][1] != 0:
        return "it does not end with an empty IEND chunk"
    if pos != len(data):
        return f"{len(data) - pos} byte(s) after its IEND chunk: the file was replaced or damaged"
    middle = names[1:-1]
    others = sorted({_kind_name(c) for c in middle if c != b"IDAT"})
    if others:
        return (f"it holds {', '.join(others)} chunk(s), which mosaic never writes (a second IHDR, EXIF orientation, "
                "transparency, a palette, colour profiles or animation frames would change what some decoders show): "
                "the file was replaced or converted")
    if not middle:
        return "it holds no IDAT chunk (no pixel data)"
    d = zlib.decompressobj()
    channels = _CHANNELS[kind]
    row = 1 + size * channels
    try:
        raw = d.decompress(b"".join(idat), size * row + 1)
    except zlib.error as e:
        return f"its pixel data does not decompress ({e}): the file is damaged"
    if len(raw) == size * row and not d.unconsumed_tail and (not d.eof or d.unused_data):
        return ("its pixel data is not one complete zlib stream of its scanlines (" + ("bytes follow the stream" if d.eof else "the stream "
                "does not end") + "): the file was replaced or damaged")
    if len(raw) != size * row or not d.eof or d.unused_data or d.unconsumed_tail:
        return (f"its pixel data holds {len(raw):,}{'+' if len(raw) > size * row or d.unconsumed_tail else ''} bytes"
                f"{'' if d.eof else ' in an unfinished zlib stream'}, not the {size * row:,} of {size} scanlines: "
                "the file is truncated or was replaced")
    if max(raw[::row]) > 4:
        return "a scanline has a filter type above 4: the file is damaged"
    return None


def _other_size(w: int, h: int, size: int) -> str:
    """The message for a dataset's image of ``w`` x ``h`` px where its spec gives ``size``."""
    return (f"{w}x{h} px, but the dataset's images are {size}x{size} (image.size of its spec): "
            "the file was replaced or damaged")


# ----------------------------------------------------------------------------------------------
# decoding images from files mosaic did not necessarily write: the size is checked before decoding
# ----------------------------------------------------------------------------------------------

#: An image to evaluate may have at most (EVAL_SCALE x the spec's image.size)^2 pixels: a model's
#: samples at up to 8 times the spec's resolution are read, a decompression bomb is refused unread.
EVAL_SCALE = 8


def eval_pixel_bound(image_size: int) -> int:
    """The most pixels an image given to ``mosaic evaluate`` may have for a spec of ``image_size``
    px: ``(EVAL_SCALE * image_size) ** 2`` (262,144 for a 64 px spec)."""
    return (EVAL_SCALE * int(image_size)) ** 2


#: formats a foreign image to score may be in (``mosaic evaluate``): rasters Pillow decodes itself. Never
#: EPS / PDF / other formats whose plugins hand the file to an outside program (Ghostscript).
FOREIGN_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF")


def _read_bounded(src, where: str, error: type[Exception], size: int, kind: str) -> bytes:
    """The bytes of ``src`` (bytes, or a path read only up to the most a ``size`` px ``kind`` PNG of
    mosaic's can take, :func:`max_png_bytes`); a larger file is refused, by its header's size or
    format where that is what differs."""
    if isinstance(src, (bytes, bytearray)):
        return bytes(src)
    limit = max_png_bytes(size, kind)
    try:
        with open(src, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise error([(where, "the image file is missing")]) from None
    except OSError as e:
        raise error([(where, f"the image file cannot be read ({e.strerror or e})")]) from None
    if len(data) > limit:
        why = png_header_problem(data[:HEADER_BYTES], size, kind)
        raise error([(where, why or f"more than {limit:,} bytes, more than a {size}x{size} {kind} PNG mosaic writes can take: "
                                    "the file was replaced")])
    return data


def decode_image(src, *, where: str, error: type[Exception], mode: str | None = "RGB", max_pixels: int | None = None,
                 exact_size: int | None = None, formats: tuple[str, ...] = ("PNG",)) -> np.ndarray:
    """Decode one image file (a path, or bytes) into a uint8 array after checking its size from the
    header alone (nothing is decompressed before).

    Args:
        where: how the image is named in an error (its path).
        error: the MosaicError class raised.
        mode: ``"RGB"`` (``[H, W, 3]``), None (as stored: a mask is ``[H, W]``).
        max_pixels: refuse more pixels than this (a decompression bomb).
        exact_size: a dataset's own file: its bytes must be a PNG in mosaic's form of ``exact_size``
            x ``exact_size`` (:func:`png_structure_problem`; an image with ``mode="RGB"``, a mask
            with ``mode=None``: 8-bit RGB / greyscale), checked before a decoder runs: a dataset's
            own file is never converted.
        formats: the Pillow formats tried (default PNG, what mosaic writes; :data:`FOREIGN_FORMATS`
            for images to score): a file of any other format, whatever its name, is refused
            before a decoder runs.
    Raises:
        error: missing, empty, truncated or not an image; too many pixels; another size or (with
            ``exact_size``) not in mosaic's PNG form.
    """
    import io

    from PIL import Image, UnidentifiedImageError

    if exact_size is not None:  # a dataset's own file: mosaic's PNG form, checked on the bytes before any decoder sees them
        kind = "image" if mode == "RGB" else "mask"
        src = _read_bounded(src, where, error, exact_size, kind)
        if (why := png_structure_problem(src, exact_size, kind)) is not None:
            raise error([(where, why)])
    try:
        im = Image.open(io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else src, formats=list(formats))
    except FileNotFoundError:
        raise error([(where, "the image file is missing")]) from None
    except Image.DecompressionBombError as e:  # a header claiming more pixels than Pillow's own limit
        raise error([(where, f"a header claiming too many pixels ({str(e)[:80]}): refused before decoding")]) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError, struct.error) as e:
        raise error([(where, f"not a readable image ({type(e).__name__}: {str(e)[:100] or 'empty or truncated file'})")]) from None
    with im:
        w, h = im.size
        if exact_size is not None and (w, h) != (exact_size, exact_size):
            raise error([(where, _other_size(w, h, exact_size))])
        if max_pixels is not None and w * h > max_pixels:
            raise error([(where, f"{w}x{h} px = {w * h:,} pixels, more than the {max_pixels:,} an image of this spec may have "
                                 f"({EVAL_SCALE} x image.size per side): refused before decoding")])
        if getattr(im, "is_animated", False):  # GIF, APNG, WebP, TIFF pages: Pillow gives the first, a browser shows them all
            raise error([(where, f"holds several frames ({im.format} animation or pages): which one is the image is not defined, and "
                                 "it was scored on the first alone; save the image as one frame (a PNG)")])
        if mode is not None and (im.mode in ("I", "F") or im.mode.startswith("I;")):  # converted to 8 bits, Pillow clips at 255
            raise error([(where, f"a {im.mode} image (16- or 32-bit samples): read as 8-bit RGB, every value above 255 would be "
                                 "white; save the image as 8-bit RGB")])
        try:
            if mode is not None and im.getexif().get(0x0112, 1) in range(2, 9):  # 2-8 turn or mirror in a viewer, not in a decoder
                raise error([(where, f"its EXIF orientation ({im.getexif().get(0x0112)}) tells a viewer (a browser, the audit page) to "
                                     "turn or mirror it, which a decoder does not: which pixels are the image is not defined; save it "
                                     "with the turn applied (PIL.ImageOps.exif_transpose) and no orientation tag")])
            im.load()
            if mode is not None and (im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info):
                alpha = np.asarray(im.convert("RGBA"), dtype=np.uint8)[..., 3]
                if alpha.size and int(alpha.min()) < 255:  # a viewer shows what lies behind, converting to RGB the hidden colours
                    raise error([(where, f"{int((alpha < 255).sum()):,} of its pixels are transparent: a viewer shows what lies behind "
                                         "them, the evaluator the colours they hide; save the image as opaque RGB (composited on "
                                         "the background it was drawn on)")])
            out = im.convert(mode) if mode is not None and im.mode != mode else im
            arr = np.asarray(out, dtype=np.uint8)
        except (OSError, ValueError, SyntaxError, EOFError, struct.error, Image.DecompressionBombError) as e:
            raise error([(where, f"the image does not decode ({type(e).__name__}: {str(e)[:100]}): truncated or damaged")]) from None
    return arr


def pixel_digest(array: np.ndarray) -> str:
    """The sha256 (hex) of an image's decoded pixels and shape: what a prediction row records of the
    image it scored (``image_sha256``), so that ``mosaic audit`` shows each verdict beside the very image it
    was given (two images swapped after scoring were shown with each other's verdicts, attack round 27).

    Args:
        array: uint8 ``[H, W, 3]`` (or ``[H, W]``) pixels as decoded (:func:`decode_image`).
    """
    a = np.ascontiguousarray(array, dtype=np.uint8)
    return hashlib.sha256(repr(a.shape).encode() + a.tobytes()).hexdigest()
