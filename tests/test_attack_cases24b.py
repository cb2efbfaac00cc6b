"""Hostile cases of a twenty-fourth attack (part B): --overwrite's kept names (foreign_names), a
folder of empty folders (dataset_folder), resumed part files (check_resumed_record), images from
other tools (png.decode_image), the latent cache's spot check, interruptions and full disks.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack24b: ...")``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli as _run, ok_cli as _ok, enospc as _enospc, verify_ok as _verify_ok, SPECS, TINY_COUNT_SPEC, clean_exit_2, copy_dataset, tiny

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _files(p: Path) -> set[str]:
    return {str(f.relative_to(p)) for f in p.rglob("*") if f.is_file() or f.is_symlink()}


# ------------------------------------------------------------------------------------------------
# honest --overwrite: masks, several Parquet shards, changed split sizes (no false alarm, nothing stale)
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    d = tmp_path_factory.mktemp("masked")
    spec = d / "spec.yaml"
    spec.write_text(TINY_COUNT_SPEC)
    r = _run(["generate", spec, "--out", d / "ds", "--masks"])
    assert r.exit_code == 0, r.output
    return spec, d / "ds"


@pytest.fixture(scope="module")
def pq_many(tmp_path_factory):
    """A Parquet dataset of several shards per split (a tiny --shard-mb)."""
    d = tmp_path_factory.mktemp("pqmany")
    spec = d / "spec.yaml"
    spec.write_text(TINY_COUNT_SPEC)
    r = _run(["generate", spec, "--out", d / "ds", "-f", "parquet", "--shard-mb", "0.001"])
    assert r.exit_code == 0, r.output
    man = json.loads((d / "ds" / "manifest.json").read_text())
    assert len(man["shards"]["train"]) > 1, man["shards"]
    return spec, d / "ds"


def test_overwrite_of_a_masked_dataset_with_masks(masked, tmp_path):
    ds = copy_dataset(masked, tmp_path)
    _ok(["generate", masked[0], "--out", ds, "--overwrite", "--masks"])
    _verify_ok(ds)


def test_overwrite_of_a_masked_dataset_without_masks_leaves_no_masks(masked, tmp_path):
    ds = copy_dataset(masked, tmp_path)
    _ok(["generate", masked[0], "--out", ds, "--overwrite"])
    _verify_ok(ds)
    assert not any(p.name == "masks" for p in ds.rglob("*")), sorted(_files(ds))


def test_overwrite_of_a_parquet_dataset_of_several_shards(pq_many, tmp_path):
    ds = copy_dataset(pq_many, tmp_path)
    _ok(["generate", pq_many[0], "--out", ds, "--overwrite", "-f", "parquet", "--shard-mb", "0.001"])
    _verify_ok(ds)


def test_overwrite_of_a_parquet_dataset_with_bigger_shards_leaves_no_stale_shard(pq_many, tmp_path):
    ds = copy_dataset(pq_many, tmp_path)
    _ok(["generate", pq_many[0], "--out", ds, "--overwrite", "-f", "parquet"])
    _verify_ok(ds)
    man = json.loads((ds / "manifest.json").read_text())
    listed = {s["name"] for v in man["shards"].values() for s in v}
    assert {p.name for p in (ds / "data").iterdir()} == listed


def test_overwrite_of_a_parquet_dataset_as_imagefolder(pq_many, tmp_path):
    ds = copy_dataset(pq_many, tmp_path)
    _ok(["generate", pq_many[0], "--out", ds, "--overwrite"])
    _verify_ok(ds)
    assert not (ds / "data").exists()


@pytest.mark.parametrize("train", [6, 12], ids=["fewer", "more"])
def test_overwrite_with_changed_split_sizes(made, tmp_path, train):
    ds = copy_dataset(made, tmp_path)
    _ok(["generate", made[0], "--out", ds, "--overwrite", "--set", f"splits.train={train}"])
    _verify_ok(ds)
    assert len(list((ds / "train" / "images").iterdir())) == train


def test_overwrite_of_a_parquet_dataset_interrupted_midway(made, tmp_path, monkeypatch):
    """An interrupted Parquet generation (manifest incomplete, some shards) is replaced by --overwrite."""
    import mosaic.parquet as P

    ds = tmp_path / "pq"
    with monkeypatch.context() as m:
        m.setattr(P, "finalize_parquet", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        r = _run(["generate", made[0], "--out", ds, "-f", "parquet", "--shard-mb", "0.001"])
    assert r.exit_code != 0
    _ok(["generate", made[0], "--out", ds, "--overwrite", "-f", "parquet"])
    _verify_ok(ds)


def test_overwrite_of_an_exported_parquet_dataset(made, tmp_path):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    _ok(["export", made[1], "-f", "parquet", "-o", pq, "--overwrite"])
    _verify_ok(pq)
    _ok(["generate", made[0], "--out", pq, "--overwrite", "-f", "parquet", "--shard-mb", "0.001"])
    _verify_ok(pq)


# ------------------------------------------------------------------------------------------------
# --overwrite bypasses: a person's files kept only by the shape of their names
# ------------------------------------------------------------------------------------------------

def _overwrite_keeps(made, tmp_path, rel: str, fmt: str = "imagefolder"):
    ds = copy_dataset(made, tmp_path)
    f = ds / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("mine")
    args = ["generate", made[0], "--out", ds, "--overwrite"] + (["-f", fmt] if fmt != "imagefolder" else [])
    r = _run(args)
    assert f.is_file() and f.read_text() == "mine", f"{rel} deleted: {r.output}"
    assert r.exit_code == 2, r.output


def test_overwrite_keeps_a_persons_folder_named_like_a_temporary_file(made, tmp_path):
    _overwrite_keeps(made, tmp_path, "train.tmp/notes.txt")


def test_overwrite_keeps_a_persons_images_tmp_folder(made, tmp_path):
    _overwrite_keeps(made, tmp_path, "train/images.tmp/mine.png")


def test_overwrite_keeps_a_persons_parquet_shard_in_an_imagefolder_dataset(made, tmp_path):
    _overwrite_keeps(made, tmp_path, "data/train-00000-of-00001.parquet")


def test_overwrite_keeps_a_persons_images_in_a_parquet_dataset(pq_many, tmp_path):
    _overwrite_keeps(pq_many, tmp_path, "train/images/000000.png", fmt="parquet")


def test_overwrite_keeps_a_persons_notes_in_a_split_of_a_parquet_dataset(pq_many, tmp_path):
    _overwrite_keeps(pq_many, tmp_path, "train/metadata.jsonl/notes.txt", fmt="parquet")


def test_a_folder_of_empty_folders_and_a_hidden_empty_file_is_not_empty(made, tmp_path):
    out = tmp_path / "o"
    (out / "a" / "b").mkdir(parents=True)
    (out / "a" / ".keep").write_text("")
    r = _run(["generate", made[0], "--out", out])
    assert r.exit_code == 2, r.output
    assert (out / "a" / ".keep").exists()


def test_a_folder_of_empty_folders_is_written_to(made, tmp_path):
    out = tmp_path / "o"
    (out / "train" / "images").mkdir(parents=True)
    (out / "x" / "y").mkdir(parents=True)
    _ok(["generate", made[0], "--out", out])
    _verify_ok(out)


# ------------------------------------------------------------------------------------------------
# honest resumes: part files this process did not write are the spec's (check_resumed_record)
# ------------------------------------------------------------------------------------------------

def _clevr_spec(tmp_path: Path) -> Path:
    p = tmp_path / "clevr.yaml"
    p.write_text(yaml.safe_dump(tiny(SPECS / "clevr_cogent.yaml", size=32, train=8, val=2, test_id=2, test_ood=2)))
    return p


def _stop_at_finalize(args, monkeypatch):
    import mosaic.dataset as D

    with monkeypatch.context() as m:
        m.setattr(D, "finalize", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        r = _run(args)
    assert r.exit_code != 0
    assert not json.loads((Path(args[args.index("--out") + 1]) / "manifest.json").read_text()).get("status") == "complete"


def _stop_after_shards(args, monkeypatch, after: int = 2):
    import mosaic.dataset as D

    real, n = D.render_shard, []

    def boom(*a, **k):
        n.append(1)
        if len(n) > after:
            raise KeyboardInterrupt
        return real(*a, **k)
    with monkeypatch.context() as m:
        m.setattr(D, "render_shard", boom)
        r = _run(args)
    assert r.exit_code != 0


@pytest.mark.parametrize("first,second", [(["--workers", "2"], []), ([], ["--workers", "2"])], ids=["w2-then-w1", "w1-then-w2"])
def test_resume_with_masks_across_worker_counts(made, tmp_path, monkeypatch, first, second):
    out = tmp_path / "ds"
    _stop_at_finalize(["generate", made[0], "--out", out, "--masks", *first], monkeypatch)
    _ok(["generate", made[0], "--out", out, "--masks", *second])
    _verify_ok(out)


def test_resume_with_masks_after_two_shards(made, tmp_path, monkeypatch):
    out = tmp_path / "ds"
    _stop_after_shards(["generate", made[0], "--out", out, "--masks"], monkeypatch)
    _ok(["generate", made[0], "--out", out, "--masks", "--workers", "2"])
    _verify_ok(out)
    ref = tmp_path / "ref"
    _ok(["generate", made[0], "--out", ref, "--masks"])
    for split in ("train", "val", "test_id", "test_ood"):  # byte-identical to an unbroken run: images, masks, records
        for sub in ("images", "masks"):
            for f in (ref / split / sub).iterdir():
                assert (out / split / sub / f.name).read_bytes() == f.read_bytes(), f"{split}/{sub}/{f.name}"
        assert (out / split / "metadata.jsonl").read_bytes() == (ref / split / "metadata.jsonl").read_bytes()
    assert (out / "checksums.sha256").read_bytes() == (ref / "checksums.sha256").read_bytes()


@pytest.mark.parametrize("masks", [[], ["--masks"]], ids=["plain", "masks"])
def test_resume_of_a_shaded_spec(tmp_path, monkeypatch, masks):
    spec = _clevr_spec(tmp_path)
    out = tmp_path / "ds"
    _stop_at_finalize(["generate", spec, "--out", out, "--workers", "2", *masks], monkeypatch)
    _ok(["generate", spec, "--out", out, *masks])
    _verify_ok(out)


def test_resume_of_a_shaded_spec_with_a_set_override(tmp_path, monkeypatch):
    spec = _clevr_spec(tmp_path)
    out = tmp_path / "ds"
    over = ["--set", "layout.min_gap=0.01"]
    _stop_after_shards(["generate", spec, "--out", out, *over], monkeypatch, after=1)
    _ok(["generate", spec, "--out", out, *over])
    _verify_ok(out)


def test_resume_of_a_parquet_generation(made, tmp_path, monkeypatch):
    import mosaic.parquet as P

    out = tmp_path / "pq"
    with monkeypatch.context() as m:
        m.setattr(P, "finalize_parquet", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        r = _run(["generate", made[0], "--out", out, "-f", "parquet", "--shard-mb", "0.001", "--masks"])
    assert r.exit_code != 0
    _ok(["generate", made[0], "--out", out, "-f", "parquet", "--shard-mb", "0.001", "--masks"])
    _verify_ok(out)


def test_resume_refuses_a_part_file_of_another_seed(made, tmp_path, monkeypatch):
    """A part file left by an interrupted run of another spec (seed changed) in the same folder."""
    out = tmp_path / "ds"
    _stop_at_finalize(["generate", made[0], "--out", out], monkeypatch)
    other = tmp_path / "o"
    _stop_at_finalize(["generate", made[0], "--out", other, "--set", "seed=7"], monkeypatch)
    shutil.copy(other / ".mosaic/parts/train-000000.jsonl", out / ".mosaic/parts/train-000000.jsonl")
    r = _run(["generate", made[0], "--out", out])
    assert r.exit_code != 0 or json.loads((out / "manifest.json").read_text())["status"] != "complete" \
        or (out / "train/metadata.jsonl").read_bytes() != (other / ".mosaic/parts/train-000000.jsonl").read_bytes().split(b"\n", 1)[1]
    if r.exit_code == 0:
        _verify_ok(out)
        ref = tmp_path / "ref"
        _ok(["generate", made[0], "--out", ref])
        assert (out / "train/metadata.jsonl").read_bytes() == (ref / "train/metadata.jsonl").read_bytes()
    else:
        _clean_exit_2(r, "part file")


# ------------------------------------------------------------------------------------------------
# images to score from other tools (png.decode_image): no false alarm, and the same pixels read
# ------------------------------------------------------------------------------------------------

def _png_with_chunks(*chunks):
    def w(im, path):
        from PIL.PngImagePlugin import PngInfo

        info = PngInfo()
        for cid, data in chunks:
            info.add(cid, data)
        im.save(path.with_suffix(".png"), pnginfo=info)
        return path.with_suffix(".png")
    return w


def _icc(im, path):
    from PIL import ImageCms

    prof = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    im.save(path, icc_profile=prof)
    return path


def _opaque_rgba(im, path):
    im.convert("RGBA").save(path)
    return path


def _palette(im, path):
    from PIL import Image

    im.convert("P", palette=Image.ADAPTIVE, colors=256).save(path)
    return path


def _trns_absent_colour(im, path):
    import numpy as np

    cols = {tuple(c) for c in np.asarray(im).reshape(-1, 3).tolist()}
    c = next((r, g, b) for r in range(256) for g in (1, 2) for b in (3,) if (r, g, b) not in cols)
    im.save(path, transparency=c)
    return path


def _fmt(fmt, ext, **kw):
    def w(im, path):
        p = path.with_suffix(ext)
        im.save(p, format=fmt, **kw)
        return p
    return w


def _jpeg_icc_exif1(im, path):
    from PIL import Image, ImageCms

    ex = Image.Exif()
    ex[0x0112] = 1
    p = path.with_suffix(".jpg")
    im.save(p, format="JPEG", quality=100, subsampling=0, progressive=True, exif=ex.tobytes(),
            icc_profile=ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    return p


def _folder_written(made, tmp_path: Path, write, split="test_ood") -> Path:
    from PIL import Image

    src = made[1] / split
    f = tmp_path / f"f-{split}"
    (f / "images").mkdir(parents=True)
    recs = []
    for line in (src / "metadata.jsonl").read_text().splitlines():
        r = json.loads(line)
        im = Image.open(src / r["file_name"]).convert("RGB")
        p = write(im, f / r["file_name"])
        recs.append({"file_name": str(p.relative_to(f)), "concepts": r["concepts"]})
    (f / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


def _scores(folder: Path, ds: Path, tmp_path: Path, name: str):
    out = tmp_path / f"m-{name}"
    r = _run(["evaluate", folder, "--spec", ds, "--check-n", "0", "--out", out])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    return m["overall"], m["by_value"]


_IDENTICAL = {
    "gamma-chunk": _png_with_chunks((b"gAMA", (45455).to_bytes(4, "big"))),
    "srgb-chunk": _png_with_chunks((b"sRGB", b"\x00")),
    "text-and-phys": _png_with_chunks((b"tEXt", b"Software\x00gimp"), (b"pHYs", (2835).to_bytes(4, "big") * 2 + b"\x01")),
    "icc-profile": _icc,
    "opaque-rgba": _opaque_rgba,
    "palette": _palette,
    "trns-of-an-absent-colour": _trns_absent_colour,
    "webp-lossless": _fmt("WEBP", ".webp", lossless=True, quality=100),
    "tiff": _fmt("TIFF", ".tiff"),
    "bmp": _fmt("BMP", ".bmp"),
}


@pytest.mark.parametrize("name", sorted(_IDENTICAL))
def test_lossless_images_from_other_tools_are_read_as_the_same_pixels(made, tmp_path, name):
    ref = _scores(_folder_written(made, tmp_path / "ref", lambda im, p: (im.save(p), p)[1]), made[1], tmp_path, "ref")
    got = _scores(_folder_written(made, tmp_path / name, _IDENTICAL[name]), made[1], tmp_path, name)
    assert got == ref


def test_a_progressive_jpeg_with_an_icc_profile_and_orientation_1_is_read(made, tmp_path):
    _scores(_folder_written(made, tmp_path, _jpeg_icc_exif1), made[1], tmp_path, "jpg")


def test_a_16_bit_greyscale_png_is_refused_by_name(made, tmp_path):
    import numpy as np
    from PIL import Image

    def w(im, path):
        a = (np.asarray(im.convert("L"), dtype=np.uint16) * 257)
        Image.fromarray(a).save(path)
        return path
    r = _run(["evaluate", _folder_written(made, tmp_path, w), "--spec", made[1], "--check-n", "0"])
    _clean_exit_2(r, "16")


@pytest.mark.parametrize("value", [0, 9], ids=["orientation-0", "orientation-9"])
def test_an_undefined_exif_orientation_value_is_read_as_no_turn(made, tmp_path, value):
    """EXIF orientation 0 / 9 are not defined values; browsers and Pillow's exif_transpose turn nothing."""
    from PIL import Image

    def w(im, path):
        ex = Image.Exif()
        ex[0x0112] = value
        p = path.with_suffix(".jpg")
        im.save(p, format="JPEG", quality=100, exif=ex.tobytes())
        return p
    _scores(_folder_written(made, tmp_path, w), made[1], tmp_path, "o")


# ------------------------------------------------------------------------------------------------
# the autoencoder folder and the latent cache: interruptions, the spot check, two writers
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ae24(tmp_path_factory):
    """A tiny trained autoencoder (2 steps), the latent test spec and a dataset of it."""
    from mosaic.dataset import generate
    from tests.conftest import tiny_autoencoder

    folder, sec, spec, _ = tiny_autoencoder(tmp_path_factory, "a24ae", steps=2)
    ds = tmp_path_factory.mktemp("a24aeds") / "ds"
    generate(spec, ds)
    return folder, sec, spec, ds


def _ae_copy(ae24, tmp_path):
    folder = tmp_path / "ae"
    shutil.copytree(ae24[0], folder)
    return folder


@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_autoencoder_training_stopped_at_its_record_is_finished_by_a_rerun(ae24, tmp_path, fault):
    import mosaic.lab.autoencoder as A

    out = tmp_path / "ae"
    real = A.atomic_write

    def boom(p, *a, **k):
        if str(p).endswith("autoencoder.json"):
            if fault == "interrupt":
                raise KeyboardInterrupt
            _enospc()
        return real(p, *a, **k)
    A.atomic_write = boom
    try:
        with pytest.raises((KeyboardInterrupt, OSError)):
            A.train_autoencoder(ae24[1], ae24[2], out, say=lambda m: None, progress=False)
    finally:
        A.atomic_write = real
    rec = A.train_autoencoder(ae24[1], ae24[2], out, say=lambda m: None, progress=False)
    assert (out / "autoencoder.json").is_file() and rec["steps"] == 2


def _latents(folder, ds, split, n, say=lambda s: None):
    from mosaic.lab.autoencoder import load_space
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset

    space = load_space(folder)
    return cached_latents(space, ds, split, MosaicDataset(ds, split).images[:n], say=say)


def test_an_honest_latent_cache_is_used_again_for_fewer_images(ae24, tmp_path):
    import torch

    folder = _ae_copy(ae24, tmp_path)
    z = _latents(folder, ae24[3], "train", 20)
    said = []
    z2 = _latents(folder, ae24[3], "train", 12, say=said.append)
    assert not said, said
    assert torch.equal(z2, z[:12])


def test_a_latent_cache_of_fewer_images_is_encoded_again(ae24, tmp_path):
    folder = _ae_copy(ae24, tmp_path)
    _latents(folder, ae24[3], "train", 4)
    said = []
    z = _latents(folder, ae24[3], "train", 10, say=said.append)
    assert said and len(z) == 10


@pytest.mark.parametrize("fault", ["record", "latents"])
def test_a_full_disk_in_a_latent_cache_write_is_encoded_again_on_the_rerun(ae24, tmp_path, monkeypatch, fault):
    import torch

    import mosaic.lab.diffusion.latent as L

    folder = _ae_copy(ae24, tmp_path)
    real = L.atomic_write

    def boom(p, *a, **k):
        if str(p).endswith(".json" if fault == "record" else ".safetensors"):
            _enospc()
        return real(p, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(L, "atomic_write", boom)
        with pytest.raises(OSError):
            _latents(folder, ae24[3], "train", 8)
    z = _latents(folder, ae24[3], "train", 8)
    fresh = tmp_path / "fresh"
    shutil.copytree(ae24[0], fresh)
    assert torch.equal(z, _latents(fresh, ae24[3], "train", 8))
    said = []
    _latents(folder, ae24[3], "train", 8, say=said.append)
    assert not said


@pytest.mark.xfail(strict=True, reason="attack24b: a latent cache with one latent swapped (record resealed) is served when the 16-index spot check misses it")
def test_a_latent_cache_with_one_latent_swapped_is_never_served(ae24, tmp_path, monkeypatch):
    import hashlib
    import random

    import torch
    from safetensors.torch import save_file

    folder = _ae_copy(ae24, tmp_path)
    z = _latents(folder, ae24[3], "train", 24)
    (cache,) = list((folder / "latents").iterdir())
    bad = z.clone()
    bad[23] = _latents(folder, ae24[3], "test_ood", 1)[0]  # a held-out latent at one training index
    save_file({"latents": bad.contiguous()}, str(cache / "train.safetensors"))
    rec = json.loads((cache / "train.json").read_text())
    rec["sha256"] = hashlib.sha256((cache / "train.safetensors").read_bytes()).hexdigest()
    (cache / "train.json").write_text(json.dumps(rec, indent=2) + "\n")
    # the draw of 16 of 24 indices misses index 23 one time in three; here it is such a draw
    monkeypatch.setattr(random.SystemRandom, "sample", lambda self, pop, k: list(pop)[:k])
    assert torch.equal(_latents(folder, ae24[3], "train", 24), z)


_TWO_WRITERS = """
import hashlib, sys
from mosaic.lab.autoencoder import load_space
from mosaic.lab.diffusion.latent import cached_latents
from mosaic.torch_data import MosaicDataset
space = load_space(sys.argv[1])
z = cached_latents(space, sys.argv[2], "train", MosaicDataset(sys.argv[2], "train").images[:24], say=lambda s: None)
print("ok", hashlib.sha256(z.contiguous().numpy().tobytes()).hexdigest())
"""


def test_two_latent_cache_writers_at_once(ae24, tmp_path):
    folder = _ae_copy(ae24, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    ps = [subprocess.Popen([sys.executable, "-c", _TWO_WRITERS, str(folder), str(ae24[3])], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in ps]
    assert all(p.returncode == 0 for p in ps), outs
    assert outs[0][0] == outs[1][0]
    said = []
    _latents(folder, ae24[3], "train", 24, say=said.append)
    assert not said
    (cache,) = list((folder / "latents").iterdir())
    assert sorted(p.name for p in cache.iterdir()) == ["train.json", "train.safetensors"]


# ------------------------------------------------------------------------------------------------
# export and Parquet repair stopped midway: the same command, rerun, finishes
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def made_pq(made, tmp_path_factory):
    pq = tmp_path_factory.mktemp("a24pq") / "pq"
    r = _run(["export", made[1], "-f", "parquet", "-o", pq, "--shard-mb", "0.001"])
    assert r.exit_code == 0, r.output
    return made[0], pq


@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_export_parquet_to_imagefolder_stopped_mid_images_then_rerun_finishes(made_pq, tmp_path, monkeypatch, fault):
    src = tmp_path / "pq"
    shutil.copytree(made_pq[1], src)
    dst = tmp_path / "if"
    real, n = Path.write_bytes, []

    def boom(self, data):
        if self.suffix == ".png":
            n.append(1)
            if len(n) == 5:
                if fault == "interrupt":
                    raise KeyboardInterrupt
                _enospc()
        return real(self, data)
    with monkeypatch.context() as m:
        m.setattr(Path, "write_bytes", boom)
        r = _run(["export", src, "-f", "imagefolder", "-o", dst])
    assert r.exit_code != 0 and "Traceback" not in r.output
    if fault == "enospc":
        _clean_exit_2(r, "disk")
    r = _run(["verify", dst])
    assert r.exit_code != 0, r.output
    _ok(["export", src, "-f", "imagefolder", "-o", dst])
    _verify_ok(dst)


def test_export_imagefolder_to_parquet_full_disk_at_a_shard_then_rerun_finishes(made, tmp_path, monkeypatch):
    import pyarrow.parquet as pqm

    dst = tmp_path / "pq"
    real, n = pqm.ParquetWriter.write_table, []

    def boom(self, *a, **k):
        n.append(1)
        if len(n) == 3:
            _enospc()
        return real(self, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(pqm.ParquetWriter, "write_table", boom)
        r = _run(["export", made[1], "-f", "parquet", "-o", dst, "--shard-mb", "0.001"])
    _clean_exit_2(r, "disk")
    _ok(["export", made[1], "-f", "parquet", "-o", dst, "--shard-mb", "0.001"])
    _verify_ok(dst)


def _damage_a_shard(pq: Path) -> Path:
    man = json.loads((pq / "manifest.json").read_text())
    name = man["shards"]["train"][1]["name"]
    p = pq / "data" / name
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))
    return p


@pytest.mark.parametrize("where", ["finalize", "mark"])
def test_parquet_repair_interrupted_is_finished_by_verify_repair_again(made_pq, tmp_path, monkeypatch, where):
    import mosaic.dataset as D
    import mosaic.parquet as P

    pq = tmp_path / "pq"
    shutil.copytree(made_pq[1], pq)
    _damage_a_shard(pq)
    mod, name = (P, "finalize_parquet") if where == "finalize" else (D, "mark_shards_for_regeneration")
    real = getattr(mod, name)

    def boom(*a, **k):
        if where == "mark":
            real(*a, **k)
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(mod, name, boom)
        r = _run(["verify", pq, "--repair"])
    assert r.exit_code != 0
    _ok(["verify", pq, "--repair"])
    _verify_ok(pq)


def test_parquet_repair_interrupted_is_finished_by_the_generate_it_names(made_pq, tmp_path, monkeypatch):
    import mosaic.parquet as P

    pq = tmp_path / "pq"
    shutil.copytree(made_pq[1], pq)
    _damage_a_shard(pq)
    with monkeypatch.context() as m:
        m.setattr(P, "finalize_parquet", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        assert _run(["verify", pq, "--repair"]).exit_code != 0
    r = _run(["generate", made_pq[0], "--out", pq, "-f", "parquet"])
    if r.exit_code == 2 and "rerun with --shard-mb " in r.output:  # the error names the shard size to give
        mb = r.output.split("rerun with --shard-mb ")[1].split()[0]
        r = _run(["generate", made_pq[0], "--out", pq, "-f", "parquet", "--shard-mb", mb])
    assert r.exit_code == 0, r.output
    _verify_ok(pq)
    assert json.loads((pq / "manifest.json").read_text())["shards"] == json.loads((made_pq[1] / "manifest.json").read_text())["shards"]


def test_a_parquet_repair_whose_shard_differs_leaves_no_complete_dataset(made_pq, tmp_path, monkeypatch):
    import mosaic.parquet as P

    pq = tmp_path / "pq"
    shutil.copytree(made_pq[1], pq)
    _damage_a_shard(pq)

    def other(img, *a, **k):  # another encoder (another mosaic or Pillow): other bytes of the same pixels
        import io

        from PIL import Image
        buf = io.BytesIO()
        Image.fromarray(__import__("numpy").asarray(img)).save(buf, format="PNG", compress_level=1)
        return buf.getvalue()
    with monkeypatch.context() as m:
        m.setattr(P, "png_bytes", other)
        r = _run(["verify", pq, "--repair"])
    assert r.exit_code == 2, r.output
    assert _run(["verify", pq]).exit_code != 0


# ------------------------------------------------------------------------------------------------
# `mosaic train transformer` stopped at its results: the rerun finishes with the same table
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tspecs(tmp_path_factory):
    from tests.test_transformer import BINDING_SPEC

    d = tmp_path_factory.mktemp("a24t") / "specs"
    d.mkdir()
    cov = yaml.safe_load((SPECS / "coverage.yaml").read_text())
    cov["image"]["size"] = 16
    cov["splits"] = {"train": 2, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"}
    (d / "coverage.yaml").write_text(yaml.safe_dump(cov))
    (d / "binding.yaml").write_text(yaml.safe_dump(BINDING_SPEC))
    return d


@pytest.fixture(scope="module")
def tref(tspecs, tmp_path_factory):
    from mosaic.lab.transformer.family import run_transformer
    from tests.test_transformer import _cfg

    cfg = _cfg(tspecs, tmp_path_factory.mktemp("a24tref"), "classifier", "tokens", training={"steps": 3})
    return run_transformer(cfg, say=lambda s: None)


@pytest.mark.parametrize("where", ["results", "write_metrics", "mark_done"])
def test_train_transformer_stopped_at_its_results_is_finished_by_a_rerun(tspecs, tref, tmp_path, where):
    import mosaic.lab.run_folder as RF
    from mosaic.lab.transformer.family import TransformerFamily, run_transformer
    from tests.test_transformer import _cfg

    cfg = _cfg(tspecs, tmp_path, "classifier", "tokens", training={"steps": 3})
    target = {"results": (TransformerFamily, "results"), "write_metrics": (RF.RunFolder, "write_metrics"),
              "mark_done": (RF.RunFolder, "mark_done")}[where]
    real = getattr(*target)

    def boom(*a, **k):
        if where == "write_metrics":
            _enospc()
        raise KeyboardInterrupt
    setattr(*target, boom)
    try:
        with pytest.raises((KeyboardInterrupt, OSError)):
            run_transformer(cfg, say=lambda s: None)
    finally:
        setattr(*target, real)
    run = cfg.run_dir()
    assert not (run / "DONE").exists()
    m = run_transformer(cfg, say=lambda s: None)
    assert (run / "DONE").is_file()
    assert m["table"] == tref["table"]
    assert json.loads((run / "metrics.json").read_text())["table"] == tref["table"]


# ------------------------------------------------------------------------------------------------
# more of --overwrite's kept names, and folders of empty folders
# ------------------------------------------------------------------------------------------------

def test_overwrite_keeps_a_persons_mask_past_the_count(masked, tmp_path):
    ds = copy_dataset(masked, tmp_path)
    (ds / "train/masks/000100.png").write_bytes((ds / "train/masks/000000.png").read_bytes())
    r = _run(["generate", masked[0], "--out", ds, "--overwrite", "--masks"])
    _clean_exit_2(r, "000100.png")
    assert (ds / "train/masks/000100.png").is_file()


def test_overwrite_keeps_an_unlisted_parquet_shard(pq_many, tmp_path):
    ds = copy_dataset(pq_many, tmp_path)
    mine = ds / "data" / "train-00007-of-00009.parquet"
    mine.write_text("mine")
    r = _run(["generate", pq_many[0], "--out", ds, "--overwrite", "-f", "parquet", "--shard-mb", "0.001"])
    assert mine.is_file() and mine.read_text() == "mine", r.output
    assert r.exit_code == 2, r.output


def test_a_folder_of_empty_folders_and_a_link_is_not_empty(made, tmp_path):
    out = tmp_path / "o"
    (out / "a").mkdir(parents=True)
    (out / "a" / "l").symlink_to(tmp_path)
    r = _run(["generate", made[0], "--out", out, "--overwrite"])
    assert r.exit_code == 2, r.output
    assert (out / "a" / "l").is_symlink()


def test_overwrite_of_a_folder_of_empty_folders(made, tmp_path):
    out = tmp_path / "o"
    (out / "a" / "b").mkdir(parents=True)
    _ok(["generate", made[0], "--out", out, "--overwrite"])
    _verify_ok(out)


def test_export_into_a_folder_of_empty_folders_verifies(made, tmp_path):
    out = tmp_path / "o"
    (out / "a" / "b").mkdir(parents=True)
    _ok(["export", made[1], "-f", "parquet", "-o", out])
    _verify_ok(out)


# ------------------------------------------------------------------------------------------------
# more images from other tools, and --copies
# ------------------------------------------------------------------------------------------------

def _gif_one_frame(im, path):
    from PIL import Image

    p = path.with_suffix(".gif")
    im.convert("P", palette=Image.ADAPTIVE, colors=256).save(p)
    return p


def _opaque_la(im, path):
    im.convert("LA").save(path)
    return path


@pytest.mark.parametrize("write", [_gif_one_frame, _opaque_la, _fmt("WEBP", ".webp", quality=90), _fmt("PNG", ".PNG"),
                                   _fmt("JPEG", ".jpeg", quality=90), lambda im, p: (im.convert("1").save(p), p)[1]],
                         ids=["gif-one-frame", "opaque-la", "webp-lossy", "upper-case-png", "jpeg-ext", "bilevel"])
def test_other_honest_images_are_read(made, tmp_path, write):
    _scores(_folder_written(made, tmp_path, write), made[1], tmp_path, "x")


@pytest.fixture(scope="module")
def other_seed(made, tmp_path_factory):
    d = tmp_path_factory.mktemp("a24seed7") / "ds"
    r = _run(["generate", made[0], "--out", d, "--set", "seed=7"])
    assert r.exit_code == 0, r.output
    return d


def test_evaluate_copies_refuses_a_dataset_of_another_spec(made, other_seed, tmp_path):
    f = tmp_path / "f"
    shutil.copytree(made[1] / "test_id", f)
    r = _run(["evaluate", f, "--spec", made[1], "--check-n", "0", "--copies", other_seed])
    _clean_exit_2(r, "--copies")


def test_evaluate_copies_of_a_parquet_form_gives_the_same_figures(made, made_pq, tmp_path):
    f = tmp_path / "f"
    shutil.copytree(made[1] / "test_id", f)
    got = []
    for i, c in enumerate((made[1], made_pq[1])):
        _ok(["evaluate", f, "--spec", made[1], "--check-n", "0", "--copies", c, "--out", tmp_path / f"m{i}"])
        got.append({k: v for k, v in json.loads((tmp_path / f"m{i}" / "metrics.json").read_text())["copies"].items() if k != "dataset"})
    assert got[0] == got[1]


# ------------------------------------------------------------------------------------------------
# two autoencoder trainings at once into one folder
# ------------------------------------------------------------------------------------------------

_TRAIN_AE = """
import sys
from mosaic.lab.autoencoder import AutoencoderSection, train_autoencoder
from mosaic.spec import parse_spec
from tests.test_latent import SPEC
sec = AutoencoderSection(factor=4, block_out_channels=[8, 16, 16], norm_num_groups=4, steps=2, batch_size=4, check_n=4,
                         device="cpu", threshold=0)
rec = train_autoencoder(sec, parse_spec(SPEC), sys.argv[1], say=lambda m: None, progress=False)
print("ok", rec["vae_sha256"])
"""


def test_two_autoencoder_trainings_into_one_folder_at_once(ae24, tmp_path):
    out = tmp_path / "ae"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    ps = [subprocess.Popen([sys.executable, "-c", _TRAIN_AE, str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in ps]
    assert all(p.returncode == 0 for p in ps), outs
    assert outs[0][0] == outs[1][0]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["autoencoder.json", "vae"]
    from mosaic.lab.autoencoder import load_space
    load_space(out)


def _png16_rgb(im, path):
    """A 48-bit RGB PNG (16 bits a sample, value v * 257: the same colours), as other tools write."""
    import struct
    import zlib

    import numpy as np

    a = np.asarray(im, dtype=np.uint16) * 257
    h, w, _ = a.shape
    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))

    def chunk(cid, data):
        return struct.pack(">I", len(data)) + cid + data + struct.pack(">I", zlib.crc32(cid + data) & 0xFFFFFFFF)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


def _gif_unused_transparent_index(im, path):
    from PIL import Image

    p = im.convert("P", palette=Image.ADAPTIVE, colors=200)
    q = path.with_suffix(".gif")
    p.save(q, transparency=255)  # an index no pixel uses, as many GIF writers set
    return q


@pytest.mark.parametrize("write", [_png16_rgb, _gif_unused_transparent_index], ids=["png-48-bit-rgb", "gif-unused-transparent-index"])
def test_more_images_from_other_tools_are_read_as_the_same_pixels(made, tmp_path, write):
    ref = _scores(_folder_written(made, tmp_path / "ref", lambda im, p: (im.save(p), p)[1]), made[1], tmp_path, "ref")
    assert _scores(_folder_written(made, tmp_path / "x", write), made[1], tmp_path, "x") == ref


# ------------------------------------------------------------------------------------------------
# a damaged part file of a resumed generate: named, and the fix it names finishes the dataset
# ------------------------------------------------------------------------------------------------

_PART_DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "nul-bytes": lambda p: p.write_bytes(p.read_bytes().replace(b"\n", b"\x00", 2)),
    "crlf": lambda p: p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n")),
}


@pytest.mark.parametrize("damage", sorted(_PART_DAMAGE))
def test_a_damaged_part_file_is_named_and_the_named_fix_finishes(made, tmp_path, monkeypatch, damage):
    out = tmp_path / "ds"
    _stop_at_finalize(["generate", made[0], "--out", out], monkeypatch)
    part = out / ".mosaic/parts/train-000000.jsonl"
    _PART_DAMAGE[damage](part)
    r = _run(["generate", made[0], "--out", out])
    _clean_exit_2(r, "part file", "delete it and rerun")
    part.unlink()
    _ok(["generate", made[0], "--out", out])
    _verify_ok(out)


# ------------------------------------------------------------------------------------------------
# --overwrite of a dataset whose folder cannot be removed itself (a mount point: rmdir gives EBUSY)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["generate", "export"])
def test_overwrite_of_a_dataset_at_a_mount_point(made, tmp_path, monkeypatch, command):
    ds = copy_dataset(made, tmp_path) if command == "generate" else tmp_path / "pq"
    if command == "export":
        _ok(["export", made[1], "-f", "parquet", "-o", ds])
    real = Path.rmdir

    def rmdir(self):
        if self == ds:
            raise OSError(errno.EBUSY, "Device or resource busy", str(self))
        return real(self)
    monkeypatch.setattr(Path, "rmdir", rmdir)
    args = ["generate", made[0], "--out", ds, "--overwrite"] if command == "generate" else \
        ["export", made[1], "-f", "parquet", "-o", ds, "--overwrite"]
    r = _run(args)
    assert "Traceback" not in r.output and not isinstance(r.exception, OSError), repr(r.exception)
    assert r.exit_code == 0, r.output
    _verify_ok(ds)


def test_overwrite_whose_folder_gains_a_file_during_the_delete_is_named(made, tmp_path, monkeypatch):
    ds = copy_dataset(made, tmp_path)
    real = Path.rmdir

    def rmdir(self):
        if self == ds:
            raise OSError(errno.ENOTEMPTY, "Directory not empty", str(self))
        return real(self)
    monkeypatch.setattr(Path, "rmdir", rmdir)
    r = _run(["generate", made[0], "--out", ds, "--overwrite"])
    assert r.exit_code == 0, r.output  # the folder itself is kept (mosaic.dataset_folder.remove_dataset): nothing to race
    _verify_ok(ds)


def test_generate_busy_file_at_the_manifest_is_named(made, tmp_path, monkeypatch):
    import mosaic.dataset as D

    with monkeypatch.context() as m:
        m.setattr(D, "write_manifest", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EBUSY, "Device or resource busy")))
        r = _run(["generate", made[0], "--out", tmp_path / "ds"])
    _clean_exit_2(r)


@pytest.mark.parametrize("name", ["EDQUOT", "EIO", "EACCES"])
def test_generate_io_errors_at_the_manifest_are_named(made, tmp_path, monkeypatch, name):
    import mosaic.dataset as D

    out = tmp_path / "ds"
    with monkeypatch.context() as m:
        m.setattr(D, "write_manifest", lambda *a, **k: (_ for _ in ()).throw(OSError(getattr(errno, name), "x")))
        r = _run(["generate", made[0], "--out", out])
    _clean_exit_2(r)
    _ok(["generate", made[0], "--out", out])
    _verify_ok(out)


@pytest.mark.parametrize("name", ["relation", "position_complex", "binding"])
def test_resume_across_worker_counts_of_shipped_specs(tmp_path, monkeypatch, name):
    d = tiny(SPECS / f"{name}.yaml", size=32)
    if name == "binding":
        d["splits"] = {"train": 1, "val": 0, "test_id": 1, "test_ood": 1, "per": "combination"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(d))
    out = tmp_path / "ds"
    _stop_at_finalize(["generate", spec, "--out", out, "--workers", "2", "--masks"], monkeypatch)
    _ok(["generate", spec, "--out", out, "--masks"])
    _verify_ok(out)


def test_resume_with_the_unfinished_dataset_as_its_own_spec(made, tmp_path, monkeypatch):
    """`mosaic generate DS --out DS`: a dataset stands for its spec (docs/cli.md), an unfinished one too, or it is named."""
    out = tmp_path / "ds"
    _stop_after_shards(["generate", made[0], "--out", out], monkeypatch, after=1)
    r = _run(["generate", out, "--out", out])
    if r.exit_code == 0:
        _verify_ok(out)
    else:
        _clean_exit_2(r)


def test_masks_read_from_a_resumed_dataset_are_the_unbroken_runs(masked, tmp_path, monkeypatch):
    import torch

    from mosaic.torch_data import MosaicDataset

    out = tmp_path / "ds"
    _stop_after_shards(["generate", masked[0], "--out", out, "--masks"], monkeypatch, after=1)
    _ok(["generate", masked[0], "--out", out, "--masks", "--workers", "2"])
    a, b = MosaicDataset(out, "train", load_masks=True), MosaicDataset(masked[1], "train", load_masks=True)
    assert torch.equal(a.images, b.images) and torch.equal(torch.stack([a[i]["mask"] for i in range(len(a))]),
                                                           torch.stack([b[i]["mask"] for i in range(len(b))]))
    assert [a[i]["targets"].tolist() for i in range(len(a))] == [b[i]["targets"].tolist() for i in range(len(b))]
