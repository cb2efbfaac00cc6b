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

import struct
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
ZLIB_LEVEL = 1
_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


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


def png_size(head: bytes) -> tuple[int, int] | None:
    """``(width, height)`` in pixels from a PNG's first 24 bytes (the signature and the ``IHDR``
    chunk's length, type, width and height: PNG specification, 2nd edition, 11.2.2), or None where
    they are not a PNG's. Reads no pixel data, so a decompression bomb costs nothing to size."""
    if len(head) < 24 or head[:8] != SIGNATURE or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def png_size_problem(head: bytes, size: int) -> str | None:
    """None when ``head`` (a file's first 24 bytes) opens a PNG of ``size`` x ``size`` pixels, else
    what is wrong, for a dataset whose spec has ``image.size: size``."""
    wh = png_size(head)
    if wh is None:
        return "not a PNG (no signature and IHDR chunk)"
    return None if wh == (size, size) else _other_size(*wh, size)


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


def decode_image(src, *, where: str, error: type[Exception], mode: str | None = "RGB", max_pixels: int | None = None,
                 exact_size: int | None = None, formats: tuple[str, ...] = ("PNG",)) -> np.ndarray:
    """Decode one image file (a path, or bytes) into a uint8 array after checking its size from the
    header alone (nothing is decompressed before).

    Args:
        where: how the image is named in an error (its path).
        error: the MosaicError class raised.
        mode: ``"RGB"`` (``[H, W, 3]``), None (as stored: a mask is ``[H, W]``).
        max_pixels: refuse more pixels than this (a decompression bomb).
        exact_size: refuse any size other than ``exact_size`` x ``exact_size`` (a dataset's images).
        formats: the Pillow formats tried (default PNG, what mosaic writes; :data:`FOREIGN_FORMATS`
            for images to score): a file of any other format, whatever its name, is refused
            before a decoder runs.
    Raises:
        error: missing, empty, truncated or not an image; too many pixels; another size.
    """
    import io

    from PIL import Image, UnidentifiedImageError

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
        try:
            im.load()
            out = im.convert(mode) if mode is not None and im.mode != mode else im
            arr = np.asarray(out, dtype=np.uint8)
        except (OSError, ValueError, SyntaxError, EOFError, struct.error, Image.DecompressionBombError) as e:
            raise error([(where, f"the image does not decode ({type(e).__name__}: {str(e)[:100]}): truncated or damaged")]) from None
    return arr
