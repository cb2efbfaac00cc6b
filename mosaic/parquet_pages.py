"""Bounds before decode for Parquet shards: every page's sizes read from its header, nothing
decompressed.

A Parquet page says in its header how many bytes it decompresses to, and the reader allocates that
much before it decompresses. A shard of 1 MB whose image cell is 1.5 GB of zeros (ZSTD) took 6 GB of
memory to check, and a resealed one (its size and sha256 written into the manifest) passed every
digest. :func:`shard_bound_problem` walks the page headers of every column chunk (Thrift compact
protocol, a few hundred bytes each) and refuses, before any row is read, a shard whose pages
decompress to more than a shard mosaic writes for the spec can hold:

- a row group of more than :data:`MAX_GROUP_ROWS` rows (:data:`mosaic.parquet.ROW_GROUP_ROWS`);
- an image or mask column chunk that decompresses to more than its rows times the largest PNG
  mosaic writes at the spec's image size (:func:`mosaic.png.max_png_bytes`), plus 64 KiB;
- any other column chunk that decompresses to more than its rows times :data:`TEXT_ROW_BYTES`
  plus 64 KiB;
- a page that decompresses to more than 256 times its stored size plus 64 KiB, whatever its codec
  (JSON text compresses some ten times, PNG bytes not at all; a bomb thousands of times);
- page headers that do not add up to the column chunk the footer records, or that cannot be read.
"""

from __future__ import annotations

from mosaic.png import max_png_bytes

#: the rows of a row group mosaic writes (:data:`mosaic.parquet.ROW_GROUP_ROWS`, which imports this module's users)
MAX_GROUP_ROWS = 1024

#: the most bytes a row's cell of a text or number column may decompress to (a record's whole JSON
#: text is a few KB; :data:`mosaic.checksums.MAX_LINE_BYTES` bounds a whole line at 16 MiB)
TEXT_ROW_BYTES = 1 << 20
#: the most a page may decompress to, per byte stored
MAX_RATIO = 256
SLACK = 64 << 10  # bytes a column chunk or page may hold beyond its bound (levels, dictionary, headers)
MAX_HEADER = 1 << 20  # a page header's largest size (its statistics included)


class _Short(Exception):
    """The buffer ended inside a page header: read more."""


class _Reader:
    """A Thrift compact-protocol reader over ``buf`` from ``pos``; only what a page header needs."""

    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise _Short
        self.pos += 1
        return self.buf[self.pos - 1]

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 70:
                raise ValueError("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, ftype: int, depth: int = 0) -> None:
        if depth > 32:
            raise ValueError("nested deeper than a page header")
        if ftype in (1, 2):  # a boolean field: its value is in its type
            return
        if ftype == 3:
            self.byte()
        elif ftype in (4, 5, 6):
            self.varint()
        elif ftype == 7:
            self.take(8)
        elif ftype == 8:
            self.take(self.varint())
        elif ftype in (9, 10):
            head = self.byte()
            n, etype = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            for _ in range(n):
                self.byte() if etype in (1, 2) else self.skip(etype, depth + 1)
        elif ftype == 11:
            n = self.varint()
            if n:
                kv = self.byte()
                for _ in range(n):
                    self.skip(kv >> 4, depth + 1)
                    self.skip(kv & 0x0F, depth + 1)
        elif ftype == 12:
            self.struct(depth + 1)
        else:
            raise ValueError(f"Thrift type {ftype} is none of the compact protocol's")

    def take(self, n: int) -> None:
        if n < 0:
            raise ValueError("a negative length")
        if self.pos + n > len(self.buf):
            raise _Short
        self.pos += n

    def struct(self, depth: int = 0, want: tuple[int, ...] = ()) -> dict[int, int]:
        """Skip a struct, returning the integer fields ``want`` names."""
        got, fid = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return got
            delta, ftype = head >> 4, head & 0x0F
            fid = fid + delta if delta else self.zigzag()
            if fid in want and ftype == 5:
                got[fid] = self.zigzag()
            else:
                self.skip(ftype, depth)


def _page_header(f, pos: int) -> tuple[int, int, int]:
    """``(uncompressed size, compressed size, header length)`` of the page header at ``pos``."""
    size = 512
    while True:
        f.seek(pos)
        r = _Reader(f.read(size))
        try:
            got = r.struct(want=(2, 3))
        except _Short:
            if size >= MAX_HEADER or len(r.buf) < size:
                raise ValueError("a page header that ends early or is larger than 1 MiB") from None
            size *= 8
            continue
        if 2 not in got or 3 not in got or got[2] < 0 or got[3] < 0:
            raise ValueError("a page header without its sizes")
        return got[2], got[3], r.pos


def _column_bound(path: str, rows: int, image_size: int) -> int:
    top = path.split(".")[0]
    if top in ("image", "mask") and path.endswith(".bytes"):
        return rows * max_png_bytes(image_size, top) + SLACK
    return rows * TEXT_ROW_BYTES + SLACK


def shard_bound_problem(f, meta, image_size: int, row_group_rows: int) -> str | None:
    """Why the Parquet file open as ``f`` (binary, seekable) with footer metadata ``meta``
    (``pyarrow.parquet.FileMetaData``) would decompress to more than a shard mosaic writes for
    ``image_size`` px can hold, or None (see the module docstring). Reads only page headers."""
    try:
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            if rg.num_rows > row_group_rows:
                return f"row group {g} holds {rg.num_rows:,} rows, more than the {row_group_rows:,} mosaic writes"
            for c in range(rg.num_columns):
                col = rg.column(c)
                path = col.path_in_schema
                bound = _column_bound(path, rg.num_rows, image_size)
                start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else col.data_page_offset
                end, pos, total = start + col.total_compressed_size, start, 0
                while pos < end:
                    unc, comp, head = _page_header(f, pos)
                    total += unc
                    if total > bound or unc > MAX_RATIO * comp + SLACK:
                        return (f"row group {g}, column {path}: its pages decompress to more than a shard mosaic writes at "
                                f"{image_size} px can hold (a page of {comp:,} stored decompresses to {unc:,}): a decompression bomb, refused unread")
                    pos += head + comp
                if pos != end:
                    return f"row group {g}, column {path}: its page headers do not add up to the column chunk the footer records"
    except (ValueError, OSError) as e:
        return f"its page headers cannot be read ({e})"
    return None
