"""Hostile cases of a seventh attack on the data path (issue 23), each closed at its mechanism.

Case 15: a dataset image (or mask) of the right size but in a format mosaic never writes (RGBA,
palette, greyscale + alpha, greyscale where RGB belongs, RGB where a mask belongs), written together
with its digests, passed ``verify``, ``export`` and every reader: the decoder converted it to RGB
without a word (an RGBA file's alpha dropped, a palette expanded). The PNG header's bit depth and
colour type are now read with its size (:func:`mosaic.png.png_header_problem`), and the decoder
checks a dataset's own file's bytes in full before decoding (:func:`mosaic.png.decode_image`).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2
from tests.test_attack_cases6 import _reseal

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 16 px dataset with instance masks."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    root = tmp_path_factory.mktemp("fmt") / "data"
    generate(parse_spec(SPEC), root, masks=True)
    return root


def _as(path: Path, mode: str) -> bytes:
    """The PNG at ``path`` re-saved by Pillow in ``mode``, same size (alpha 0 everywhere for RGBA / LA:
    a transparent image whose hidden colours the reader would have shown)."""
    from PIL import Image

    with Image.open(path) as im:
        im.load()
        out = im.convert(mode)
    if mode in ("RGBA", "LA"):
        out.putalpha(0)
    buf = io.BytesIO()
    out.save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("which, mode, said", [
    ("images", "RGBA", "8-bit RGBA (colour type 6)"),
    ("images", "P", "palette (colour type 3)"),
    ("images", "LA", "greyscale + alpha (colour type 4)"),
    ("images", "L", "8-bit greyscale (colour type 0), but a dataset's images are 8-bit RGB"),
    ("masks", "RGB", "8-bit RGB (colour type 2), but a dataset's masks are 8-bit greyscale"),
])
def test_a_file_of_the_right_size_in_another_format_resealed_is_refused_everywhere(tmp_path, data, which, mode, said):
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "data"
    shutil.copytree(data, root)
    f = root / "train" / which / "000002.png"
    f.write_bytes(_as(f, mode))
    _reseal(root)
    for quick in ([], ["--quick"]):
        res = runner.invoke(app, ["verify", str(root), *quick])
        assert res.exit_code == 1 and f"train/{which}/000002.png" in res.output and said in res.output, res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]), said)
    assert not (tmp_path / "pq" / "manifest.json").exists()
    for read in (lambda: MosaicDataset(root, "train", load_masks=True), lambda: load_dataset(root)):
        with pytest.raises(DatasetError, match="colour type"):
            read()


def test_the_parquet_shard_check_reads_each_rows_format(tmp_path, data):
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from mosaic.errors import DatasetError
    from mosaic.hf import write_card
    from mosaic.spec import parse_spec
    from mosaic.torch_data import MosaicDataset

    res = runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(tmp_path / "pq")])
    assert res.exit_code == 0, res.output
    root = tmp_path / "pq"
    man = json.loads((root / "manifest.json").read_text())
    shard = man["shards"]["train"][0]
    p = root / "data" / shard["name"]
    table = pq.ParquetFile(p).read()
    rows = table.to_pylist()
    rows[1]["image"]["bytes"] = _as(data / "train" / "images" / "000001.png", "RGBA")
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), p)
    shard.update(bytes=p.stat().st_size, sha256=hashlib.sha256(p.read_bytes()).hexdigest())
    (root / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    write_card(root, parse_spec(man["spec"]), man, "parquet")
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "RGBA (colour type 6)" in res.output and "sample 1, image" in res.output, res.output
    with pytest.raises(DatasetError, match="RGBA"):
        MosaicDataset(root, "train")


def test_the_decoder_refuses_another_stored_mode_for_a_datasets_own_file_and_converts_a_foreign_one(data):
    """The second line: decode_image with ``exact_size`` (a dataset's file) never converts; without it
    (an image to score, from anywhere) it converts an opaque one to RGB as before, and refuses transparent pixels."""
    from mosaic.errors import DatasetError
    from mosaic.png import decode_image

    rgba = _as(data / "train" / "images" / "000000.png", "RGBA")
    with pytest.raises(DatasetError, match="8-bit RGBA .colour type 6., but a dataset's images are 8-bit RGB"):
        decode_image(rgba, where="x.png", error=DatasetError, exact_size=16)
    rgb = _as(data / "train" / "masks" / "000000.png", "RGB")
    with pytest.raises(DatasetError, match="8-bit RGB .colour type 2., but a dataset's masks are 8-bit greyscale"):
        decode_image(rgb, where="m.png", error=DatasetError, mode=None, exact_size=16)
    with pytest.raises(DatasetError, match="transparent"):  # what a viewer shows is not what it hides (attack round 23)
        decode_image(rgba, where="x.png", error=DatasetError)
    from PIL import Image

    buf = io.BytesIO()
    Image.open(io.BytesIO(rgba)).convert("RGB").convert("RGBA").save(buf, format="PNG")  # opaque RGBA: converted
    arr = decode_image(buf.getvalue(), where="x.png", error=DatasetError)
    assert arr.shape == (16, 16, 3) and arr.dtype == np.uint8
    # mosaic's own files still decode, unchanged
    own = decode_image(data / "train" / "images" / "000000.png", where="own", error=DatasetError, exact_size=16)
    mask = decode_image(data / "train" / "masks" / "000000.png", where="own", error=DatasetError, mode=None, exact_size=16)
    assert own.shape == (16, 16, 3) and mask.shape == (16, 16)


def test_the_header_check_names_interlace_and_a_truncated_ihdr():
    import struct
    import zlib

    from mosaic.png import HEADER_BYTES, encode_png, png_header_problem

    good = encode_png(np.zeros((16, 16, 3), np.uint8))
    assert png_header_problem(good[:HEADER_BYTES], 16) is None
    assert png_header_problem(encode_png(np.zeros((16, 16), np.uint8))[:HEADER_BYTES], 16, "mask") is None
    ihdr = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 1)
    laced = good[:8] + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    assert "interlaced" in png_header_problem(laced, 16)
    assert "truncated inside its IHDR" in png_header_problem(good[:26], 16)
    assert "16x16 px, but the dataset's images are 32x32" in png_header_problem(good[:HEADER_BYTES], 32)


# ------------------------------------------------------------------------------------------------
# case 16: a PNG that starts with mosaic's header but is not mosaic's form (a second IHDR, EXIF
# orientation, a bad CRC, short pixel data, bytes after IEND) passed verify, export and HF loading,
# because only the first 29 bytes and the trailer were read: decoders then disagreed (Pillow takes
# the last IHDR; HF datasets applies EXIF orientation; a short IDAT decodes to black rows)
# ------------------------------------------------------------------------------------------------

def _chunk(kind: bytes, body: bytes) -> bytes:
    import struct
    import zlib

    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _ihdr(w: int, h: int, depth: int = 8, colour: int = 2, interlace: int = 0) -> bytes:
    import struct

    return struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, interlace)


def _forged(own: bytes, how: str) -> bytes:
    """``own`` (mosaic's 16 px RGB PNG: signature, IHDR, IDAT, IEND) changed one way."""
    import zlib

    sig, ihdr, rest = own[:8], own[8:33], own[33:]
    iend = _chunk(b"IEND", b"")
    idat = rest[:-12]
    if how == "second_ihdr":  # Pillow reads the last IHDR: a 64x64 RGBA image behind mosaic's header
        big = np.zeros((64, 1 + 64 * 4), np.uint8)
        return sig + ihdr + _chunk(b"IHDR", _ihdr(64, 64, 8, 6)) + _chunk(b"IDAT", zlib.compress(big.tobytes())) + iend
    if how == "exif":  # orientation 2 (mirrored): HF datasets would flip it, mosaic's reader would not
        exif = bytes.fromhex("4d4d002a000000080001011200030000000100020000000000")
        return sig + ihdr + _chunk(b"eXIf", exif) + idat + iend
    if how == "bad_crc":
        return sig + ihdr[:-4] + b"\0\0\0\0" + rest
    if how == "short_idat":  # a complete zlib stream of 8 of the 16 scanlines: Pillow fills the rest with black
        rows = zlib.decompress(idat[8:-4])
        return sig + ihdr + _chunk(b"IDAT", zlib.compress(rows[:len(rows) // 2])) + iend
    if how == "after_iend":
        return own + b"trailing bytes" + iend
    if how == "trns":
        return sig + ihdr + _chunk(b"tRNS", b"\0\0\0\0\0\0") + rest
    raise ValueError(how)


@pytest.mark.parametrize("how, said", [
    ("second_ihdr", "'IHDR' chunk(s), which mosaic never writes"),
    ("exif", "'eXIf' chunk(s), which mosaic never writes"),
    ("bad_crc", "CRC of its 'IHDR' chunk"),
    ("short_idat", "not the 784 of 16 scanlines"),
    ("after_iend", "after its IEND chunk"),
    ("trns", "'tRNS' chunk(s)"),
])
def test_a_png_in_another_form_behind_mosaics_header_resealed_is_refused_by_every_reader(tmp_path, data, how, said):
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset
    from mosaic.png import png_structure_problem
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "data"
    shutil.copytree(data, root)
    f = root / "train" / "images" / "000002.png"
    forged = _forged(f.read_bytes(), how)
    assert png_structure_problem(f.read_bytes(), 16) is None and said in (png_structure_problem(forged, 16) or "")
    f.write_bytes(forged)
    _reseal(root)
    for quick in ([], ["--quick"]):
        res = runner.invoke(app, ["verify", str(root), *quick])
        assert res.exit_code == 1 and "train/images/000002.png" in res.output and said in " ".join(res.output.split()), res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]))
    for read in (lambda: MosaicDataset(root, "train"), lambda: load_dataset(root)):
        with pytest.raises(DatasetError, match="000002.png"):
            read()


def test_the_decoder_checks_mosaics_form_on_its_own_when_no_quick_check_ran(tmp_path, data):
    """decode_image with ``exact_size`` is the second line (MosaicDataset with verify=False)."""
    from mosaic.errors import DatasetError
    from mosaic.png import decode_image

    own = (data / "train" / "images" / "000002.png").read_bytes()
    for how in ("second_ihdr", "short_idat", "exif"):
        with pytest.raises(DatasetError):
            decode_image(_forged(own, how), where="x.png", error=DatasetError, exact_size=16)
    p = tmp_path / "big.png"
    p.write_bytes(own + b"\0" * 20_000)  # larger than any 16 px PNG mosaic writes: refused from its size, unread
    with pytest.raises(DatasetError, match="more than"):
        decode_image(p, where="big.png", error=DatasetError, exact_size=16)


# ------------------------------------------------------------------------------------------------
# case 17: a masks dataset whose records lost (or nulled) mask_file_name passed verify (the masks were
# never counted) and export crashed with a KeyError traceback
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit", ["removed", "null"])
def test_a_masks_dataset_record_without_its_mask_name_is_refused(tmp_path, data, edit):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "data"
    shutil.copytree(data, root)
    meta = root / "train" / "metadata.jsonl"
    rows = [json.loads(x) for x in meta.read_text().splitlines()]
    if edit == "removed":
        rows[3].pop("mask_file_name")
    else:
        rows[3]["mask_file_name"] = None
    (root / "train" / "masks" / "000003.png").unlink()
    meta.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in rows))
    _reseal(root)
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "metadata.jsonl:4" in res.output and "it names no mask" in res.output, res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]))
    with pytest.raises(DatasetError, match="metadata.jsonl"):
        MosaicDataset(root, "train", load_masks=True)


# ------------------------------------------------------------------------------------------------
# case 18: a Parquet shard resealed with another schema (a column missing, added or of another type)
# or with rows repeated, moved or renumbered passed verify, or was a KeyError / AttributeError
# traceback in the shard check itself
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pq_data(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fmtpq") / "pq"
    res = runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _reseal_shard(root: Path, edit) -> str:
    import hashlib

    import pyarrow.parquet as pq

    from mosaic.hf import write_card
    from mosaic.spec import parse_spec

    man = json.loads((root / "manifest.json").read_text())
    shard = man["shards"]["train"][0]
    p = root / "data" / shard["name"]
    table = edit(pq.ParquetFile(p).read())
    pq.write_table(table, p)
    shard.update(bytes=p.stat().st_size, sha256=hashlib.sha256(p.read_bytes()).hexdigest(), rows=table.num_rows)
    (root / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    write_card(root, parse_spec(man["spec"]), man, "parquet")
    return f"data/{shard['name']}"


def _drop(name):
    return lambda t: t.drop_columns([name])


def _plain_image(t):
    import pyarrow as pa

    i = t.schema.get_field_index("image")
    return t.set_column(i, "image", pa.array([c["bytes"] for c in t.column("image").to_pylist()], pa.binary()))


def _string_index(t):
    import pyarrow as pa

    i = t.schema.get_field_index("index")
    return t.set_column(i, "index", pa.array([str(x) for x in t.column("index").to_pylist()]))


def _extra(t):
    import pyarrow as pa

    return t.append_column("note", pa.array(["x"] * t.num_rows))


def _rows(order_fn):
    import pyarrow as pa

    def edit(t):
        rows = t.to_pylist()
        return pa.Table.from_pylist(order_fn(rows), schema=t.schema)
    return edit


def _set_index(rows, k, value):
    rows[k]["index"] = value
    return rows


def _swap_class_names(t):
    """The footer's HF features with two colour class names swapped (attack 9): HF would read labels with them."""
    meta = dict(t.schema.metadata)
    hf = json.loads(meta[b"huggingface"])
    names = hf["info"]["features"]["labels"]["color"]["names"]
    names[0], names[1] = names[1], names[0]
    meta[b"huggingface"] = json.dumps(hf).encode()
    return t.replace_schema_metadata(meta)


def _drop_footer_key(t):
    return t.replace_schema_metadata({})


@pytest.mark.parametrize("edit, said", [
    (_drop("index"), "no column index"),
    (_drop("caption"), "no column caption"),
    (_drop("mask"), "no column mask"),
    (_plain_image, "image is binary"),
    (_string_index, "index is string"),
    (_extra, "column(s) note mosaic never writes"),
    (_rows(lambda r: r[:3] + [r[2]] + r[4:]), "holds index 2"),
    (_rows(lambda r: r[:2] + [r[3], r[2]] + r[4:]), "holds index 3"),
    (_rows(lambda r: _set_index(r, 1, 999)), "holds index 999"),
    (_rows(lambda r: _set_index(r, 1, None)), "holds index None"),
    (_rows(lambda r: [dict(x, image=dict(x["image"], path="../../x.png")) if x["index"] == 1 else x for x in r]), "'../../x.png'"),
    (_swap_class_names, "'huggingface' metadata"),
    (_drop_footer_key, "metadata keys"),
])
def test_a_parquet_shard_of_another_schema_or_row_order_resealed_is_refused(tmp_path, pq_data, edit, said):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "pq"
    shutil.copytree(pq_data, root)
    where = _reseal_shard(root, edit)
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and where in res.output and said in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "imagefolder", "-o", str(tmp_path / "img")]), where)
    assert not (tmp_path / "img").exists()
    with pytest.raises(DatasetError, match=where.replace(".", r"\.")):
        MosaicDataset(root, "train", load_masks=True)


def test_a_fifo_standing_for_the_manifest_is_named_as_such_by_export(tmp_path, data):
    import os

    root = tmp_path / "data"
    shutil.copytree(data, root)
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]),
                  "not a regular file")


def test_a_byte_flipped_image_is_altered_to_the_full_check_and_damaged_to_the_quick_one(tmp_path, data):
    """Without a reseal the digest names it (``altered``: --repair rewrites it); the quick check, which has no
    digests, now finds it too, from the CRC of the chunk the flip landed in."""
    root = tmp_path / "data"
    shutil.copytree(data, root)
    f = root / "val" / "images" / "000001.png"
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0xFF
    f.write_bytes(bytes(b))
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "val/images/000001.png: altered" in res.output, res.output
    res = runner.invoke(app, ["verify", str(root), "--quick"])
    assert res.exit_code == 1 and "val/images/000001.png" in res.output and "CRC" in res.output, res.output
    res = runner.invoke(app, ["verify", str(root), "--repair"])
    assert res.exit_code == 0 and runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_the_header_check_refuses_a_compression_or_filter_method_png_does_not_define_and_names_a_stream_with_trailing_bytes():
    """Attack 8: Pillow ignores the IHDR compression byte and libpng refuses it, so readers would differ; a complete
    zlib stream followed by more bytes was named with a self-contradicting size."""
    import struct
    import zlib

    from mosaic.png import HEADER_BYTES, encode_png, png_header_problem, png_structure_problem

    good = encode_png(np.zeros((16, 16, 3), np.uint8))
    for comp, filt in ((1, 0), (0, 1)):
        ihdr = struct.pack(">IIBBBBB", 16, 16, 8, 2, comp, filt, 0)
        bad = good[:8] + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + good[33:]
        assert "PNG defines only 0" in png_header_problem(bad[:HEADER_BYTES], 16)
    rows = zlib.decompress(good[41:-16])
    body = zlib.compress(rows) + b"tail"
    idat = struct.pack(">I", len(body)) + b"IDAT" + body + struct.pack(">I", zlib.crc32(b"IDAT" + body))
    why = png_structure_problem(good[:33] + idat + good[-12:], 16)
    assert "bytes follow the stream" in why and "not the 784" not in why
