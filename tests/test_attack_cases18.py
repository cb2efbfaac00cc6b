"""Hostile cases of an eighteenth attack on the data path (issue 23).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack18: ...")``:

- wrong data: a format-2 manifest with its ``checksums`` record removed is read as a legacy dataset
  (``mosaic.verify.read_manifest`` / ``read_checksums``): after the ``--repair`` the card error suggests,
  swapped images pass ``verify`` ("OK ... full check") and ``MosaicDataset``;
- wrong data: the dataset card's own loading example (plain ``datasets.load_dataset``) on a copy of a
  dataset serves the original's cache entry, whose image paths lie in the original (regenerated since);
- claims believed: a run's ``config.yaml`` edited in what its weights mean but not their shapes
  (conditioning mode, noise schedule, prediction type) is sampled with; ``vae/config.json`` edited
  (``act_fn``, ``scaling_factor``) keeps the quality check saved for the weights' sha256; records of
  held-out combinations without a ``held_out`` flag are scored as seen; a manifest of another
  ``format`` is read and verified;
- tracebacks: a YAML integer of more than 4300 digits (``mosaic.overrides.safe_load``);
- messages: a copied finished run is named by the original's folder (``mosaic.cli.train``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import ROOT, clean_exit_2, copy_dataset, edit_manifest

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


_copy, _edit_manifest = copy_dataset, edit_manifest


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _swap(a: Path, b: Path) -> None:
    ta, tb = a.read_bytes(), b.read_bytes()
    a.write_bytes(tb)
    b.write_bytes(ta)


# ------------------------------------------------------------------------------------------------
# class 1: identity on every read
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("record", ["deleted", "null", "empty"])
def test_a_manifest_whose_checksums_record_was_removed_is_never_read_as_a_legacy_dataset(made, tmp_path, record):
    """Two train images swapped (their records kept), then the manifest's ``checksums`` record removed: the
    quick check names only the card; ``verify --repair`` (which the message suggests) writes the card again
    for the digest-less manifest, and from then on ``verify`` says "OK ... full check" and ``MosaicDataset``
    pairs sample 0's labels with sample 1's image. A manifest of format ``mosaic-dataset/2`` always has the
    record: its absence is damage, never the legacy form."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    assert json.loads((ds / "manifest.json").read_text())["format"] == "mosaic-dataset/2"

    def edit(m):
        if record == "deleted":
            del m["checksums"]
        else:
            m["checksums"] = None if record == "null" else {}

    _edit_manifest(ds, edit)
    _swap(ds / "train" / "images" / "000000.png", ds / "train" / "images" / "000001.png")
    runner.invoke(app, ["verify", str(ds), "--repair"])
    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    with pytest.raises(DatasetError):
        MosaicDataset(ds, "train")


@pytest.mark.parametrize("fmt", ["other-tool/1", "mosaic-dataset/99", 2])
def test_a_manifest_of_another_format_is_refused_by_verify_and_the_readers(made, tmp_path, fmt):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    _edit_manifest(ds, lambda m: m.update(format=fmt))
    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code == 2 and "format" in r.output and "Traceback" not in r.output, r.output
    with pytest.raises(DatasetError, match="format"):
        MosaicDataset(ds, "train")


@pytest.mark.parametrize("edit, said", [
    (lambda m: m["splits"]["train"].update(count=8.0), "whole number"),
    (lambda m: m["splits"].update(train=[8]), "whole number"),
    (lambda m: m.update(spec=None), "spec or splits missing"),
    (lambda m: m.update(spec="t"), "spec or splits missing"),
    (lambda m: m.update(splits=None), "spec or splits missing"),
], ids=["float_count", "list_count", "null_spec", "str_spec", "null_splits"])
def test_a_manifest_count_or_spec_of_another_type_is_named_by_verify_and_the_reader(made, tmp_path, edit, said):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    _edit_manifest(ds, edit)
    before = _tree(ds)
    for args in (["verify", str(ds)], ["verify", str(ds), "--repair"]):
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", said)
    with pytest.raises(DatasetError, match="manifest.json is damaged"):
        MosaicDataset(ds, "train")
    assert _tree(ds) == before


def test_a_stray_file_whose_name_is_not_utf8_is_named_escaped(made, tmp_path):
    """A file named with a byte that is not UTF-8 (``\\xff``) in ``train/images``: named (as ``\\udcff``), never
    a UnicodeEncodeError while printing it; the reader refuses the dataset."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    with open(os.fsencode(ds / "train" / "images") + b"/\xff.png", "wb") as f:
        f.write(b"x")
    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code == 1 and "stray" in r.output and "Traceback" not in r.output, r.output
    with pytest.raises(DatasetError, match="stray"):
        MosaicDataset(ds, "train")


def test_versions_of_another_shape_are_quoted_when_a_repair_stops(made, tmp_path):
    """A repair whose regenerated bytes differ from the recorded digest names the versions record; a
    ``versions`` of another shape (a string, a list, null) is quoted, never a traceback."""
    for val in ("x", [1], None, {"mosaic": {"a": 1}}):
        ds = _copy(made, tmp_path, f"ds{len(list(tmp_path.iterdir()))}")
        cs = ds / "checksums.sha256"
        lines = [("0" * 64 + "  train/images/000001.png") if ln.endswith("train/images/000001.png") else ln
                 for ln in cs.read_text().splitlines()]
        cs.write_text("\n".join(lines) + "\n")

        def edit(m, val=val):
            m["versions"] = val
            m["checksums"]["sha256"] = hashlib.sha256(cs.read_bytes()).hexdigest()

        _edit_manifest(ds, edit)
        _clean_exit_2(runner.invoke(app, ["verify", str(ds), "--repair"]), "regenerating it gives other bytes than the recorded digest")


def test_a_parquet_shard_record_without_its_digest_is_damage_not_legacy(made, tmp_path):
    """The Parquet form of the case above: a shard record whose ``sha256`` was removed (or null), rows inside
    swapped, is refused by verify and by --repair, nothing written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "p"
    assert runner.invoke(app, ["export", str(made[1]), "--out", str(src), "-f", "parquet"]).exit_code == 0
    for variant in ("del", "null"):
        d = tmp_path / f"p_{variant}"
        shutil.copytree(src, d)
        sh = d / "data" / "train-00000-of-00001.parquet"
        t = pq.read_table(sh)
        img = t.column("image").to_pylist()
        img[0], img[1] = img[1], img[0]
        f = t.schema.field("image")
        pq.write_table(t.set_column(t.schema.get_field_index("image"), f, pa.array(img, type=f.type)), sh)

        def edit(m, variant=variant):
            rec = m["shards"]["train"][0]
            if variant == "del":
                rec.pop("sha256")
            else:
                rec["sha256"] = None
            rec["bytes"] = sh.stat().st_size

        _edit_manifest(d, edit)
        before = _tree(d)
        for args in (["verify", str(d)], ["verify", str(d), "--repair"]):
            _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", "a sha256")
        assert _tree(d) == before


# ------------------------------------------------------------------------------------------------
# class 2: no write leaves the folder it owns
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["generate", "export"])
def test_overwrite_of_a_dataset_whose_images_folder_is_a_link_leaves_the_links_target_alone(made, tmp_path, how):
    """``train/images`` a link to another dataset's images: ``generate --overwrite`` (another seed) and
    ``export --overwrite`` replace the dataset and never delete or write through the link."""
    victim = _copy(made, tmp_path, "victim")
    before = _tree(victim)
    ds = _copy(made, tmp_path)
    shutil.rmtree(ds / "train" / "images")
    os.symlink(victim / "train" / "images", ds / "train" / "images")
    if how == "generate":
        r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds), "--overwrite", "--set", "seed=5"])
    else:
        r = runner.invoke(app, ["export", str(made[1]), "--out", str(ds), "--overwrite", "-f", "parquet"])
    assert r.exit_code == 0, r.output
    assert _tree(victim) == before
    assert not (ds / "train" / "images").is_symlink()


# ------------------------------------------------------------------------------------------------
# class 4: claims checked
# ------------------------------------------------------------------------------------------------

def _folder_to_score(made, tmp_path, edit_record) -> Path:
    ev = tmp_path / "ev"
    (ev / "images").mkdir(parents=True)
    rows = [json.loads(x) for x in (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()]
    lines = []
    for r in rows:
        shutil.copy(made[1] / "test_ood" / r["file_name"], ev / r["file_name"])
        rec = {"file_name": r["file_name"], "concepts": dict(r["concepts"])}
        edit_record(rec)
        lines.append(json.dumps(rec) + "\n")
    (ev / "metadata.jsonl").write_text("".join(lines))
    return ev


def test_a_count_given_as_true_is_not_read_as_one(made, tmp_path):
    def edit(rec):
        if rec["concepts"]["count"] == 1:
            rec["concepts"]["count"] = True

    ev = _folder_to_score(made, tmp_path, edit)
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0"]), "count = True (bool)")


@pytest.mark.parametrize("flag", ["absent", "null"])
def test_images_of_held_out_combinations_without_flags_are_never_scored_as_seen(made, tmp_path, flag):
    """Every image of the dataset's test_ood split (all held out by the spec) given without ``held_out``:
    the spec is at hand, so they are scored as held out (or refused), never as seen accuracy."""
    def edit(rec):
        if flag == "null":
            rec["held_out"] = None

    ev = _folder_to_score(made, tmp_path, edit)
    out = tmp_path / "out"
    r = runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0", "-o", str(out)])
    if r.exit_code == 2:
        assert "held_out" in r.output and "Traceback" not in r.output
        return
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["seen"]["n"] == 0 and m["held_out"]["n"] == 3


@pytest.fixture(scope="module")
def ev_dir(tmp_path_factory):
    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec
    from tests.conftest import TINY_COUNT_SPEC
    import yaml

    out = tmp_path_factory.mktemp("ev18") / "ev"
    train_evaluator(parse_spec(yaml.safe_load(TINY_COUNT_SPEC)), out,
                    LearnedConfig(steps=2, batch_size=4, n_train=8, check_n=8, input_size=16, width=4, threads=1))
    return out


def test_an_evaluator_whose_class_names_were_reordered_is_refused(made, ev_dir, tmp_path):
    """``config.json``'s ``concepts.color`` reordered (the weights' output 0 would read as ``green``): refused
    before scoring, naming both orders."""
    ev = tmp_path / "ev"
    shutil.copytree(ev_dir, ev)
    p = ev / "config.json"
    c = json.loads(p.read_text())
    c["concepts"]["color"] = ["green", "red", "blue"]
    p.write_text(json.dumps(c, indent=2))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(made[1] / "train"), "-e", str(ev), "--check-n", "0"]),
                  "was trained for spec", "green")


@pytest.mark.parametrize("old, new", [
    ("conditioning: factorized", "conditioning: combination"),
    ("prediction_type: epsilon", "prediction_type: v_prediction"),
    ("beta_schedule: squaredcos_cap_v2", "beta_schedule: linear"),
    ("num_train_timesteps: 1000", "num_train_timesteps: 500"),
], ids=["conditioning", "prediction_type", "beta_schedule", "timesteps"])
def test_a_run_config_edited_in_what_its_weights_mean_is_refused_by_sample(drun, tmp_path, old, new):
    """The factorized conditioner of the tiny run is ``embed.weight [7, 16]`` (3 + 2 values + 2), the
    combination one ``[7, 16]`` (6 cells + 1): the shape check passes and the run's weights are read as
    another conditioning. The schedule and prediction type change no tensor at all. Each gives samples of a
    model the weights are not, exit 0; the config the weights were trained with is known at export time."""
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    cfg = run / "config.yaml"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))
    out = tmp_path / "s"
    r = runner.invoke(app, ["sample", str(run), "--out", str(out)])
    _clean_exit_2(r, "config.yaml")
    assert not out.exists()


@pytest.fixture(scope="module")
def ae_folder(tmp_path_factory):
    """A tiny trained autoencoder folder (3 steps, 16 px) and its section and spec, with its saved check."""
    from tests.conftest import tiny_autoencoder

    return tiny_autoencoder(tmp_path_factory, "ae18", steps=3)


@pytest.mark.parametrize("key, value", [("act_fn", "relu"), ("scaling_factor", 30.0)])
def test_an_autoencoder_config_edited_in_what_its_weights_mean_is_never_trusted_on_its_old_check(ae_folder, tmp_path, key, value):
    """``vae/config.json``'s ``act_fn`` changed: every reconstruction differs (max |diff| ~1 on [-1, 1]), yet
    ``checked`` returns the saved ``check-<key>.json`` (keyed by the weights' sha256 only) as passed; the
    cached latents (``latents/<manifest>/<split>.json``, keyed the same way) would be decoded under another
    ``scaling_factor``. The config the weights were trained with is refused when edited, or the check redone."""
    from mosaic.errors import TrainingError
    from mosaic.lab.autoencoder import checked, load_space

    src, sec, spec, saved = ae_folder
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    p = f / "vae" / "config.json"
    c = json.loads(p.read_text())
    c[key] = value
    p.write_text(json.dumps(c, indent=2))
    try:
        space = load_space(f)
    except TrainingError as e:
        assert "config.json" in str(e)
        return
    (check,) = f.glob("check-*.json")
    stored = json.loads(check.read_text())
    assert stored["passed"] is True
    res = checked(f, sec, spec, space, say=lambda m: None)
    assert json.loads(json.dumps(res, sort_keys=True, default=str)) != stored  # measured again on what the folder now computes


# ------------------------------------------------------------------------------------------------
# class 2: writers take their folder's own lock, also through a link
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("via", ["folder", "link"])
def test_evaluate_out_through_a_link_takes_the_real_folders_lock(made, tmp_path, via):
    from tests.conftest import hold_lock

    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    p = hold_lock(real)
    try:
        r = runner.invoke(app, ["evaluate", str(made[1] / "test_ood"), "--check-n", "0", "-o", str(real if via == "folder" else link)])
    finally:
        p.kill()
        p.wait()
    if via == "folder":
        _clean_exit_2(r, "another process", "is writing evaluation folder", ".real.lock")
    else:  # a link at --out is refused outright (attack round 23), before any lock
        _clean_exit_2(r, "symbolic link")
    assert list(real.iterdir()) == []


def test_evaluator_train_stops_while_another_process_writes_its_folder(made, tmp_path):
    from tests.conftest import hold_lock

    out = tmp_path / "ev"
    p = hold_lock(out)
    try:
        r = runner.invoke(app, ["evaluator", "train", str(made[0]), "--out", str(out), "--steps", "1", "--n-train", "4", "--check-n", "0"])
    finally:
        p.kill()
        p.wait()
    _clean_exit_2(r, "another process", "evaluator folder")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# class 7: named errors, exit 2, for numbers Python will not convert
# ------------------------------------------------------------------------------------------------

BIG = "9" * 5000  # an integer literal longer than Python's int-from-text limit (4300 digits)


@pytest.mark.parametrize("kind", ["spec_validate", "spec_generate", "train_config", "sweep", "report_sweep_yaml"])
def test_a_yaml_integer_longer_than_python_converts_is_a_named_error(made, drun, tmp_path, kind):
    """PyYAML's int constructor calls ``int(text)``, which refuses more than 4300 digits with a ValueError
    that no reader names: ``mosaic validate`` / ``generate`` / ``train`` / ``sweep`` print a traceback, exit 1.
    The same number in a run's ``config.yaml`` (``mosaic sample``), a ``--set`` value, a manifest or a
    ``metadata.jsonl`` is named."""
    if kind.startswith("spec"):
        f = tmp_path / "big.yaml"
        f.write_text(made[0].read_text().replace("name: t", f"name: t\nseed: {BIG}"))
        args = ["validate", str(f)] if kind == "spec_validate" else ["generate", str(f), "--out", str(tmp_path / "out")]
    elif kind == "train_config":
        f = tmp_path / "cfg.yaml"
        text = (drun[0] / "config.yaml").read_text().replace("\n  seed: 0\n", f"\n  seed: {BIG}\n", 1)
        assert BIG in text
        f.write_text("\n".join(f"out: {tmp_path / 'run'}" if ln.startswith("out:") else ln for ln in text.splitlines()) + "\n")
        args = ["train", "diffusion", str(f)]
    elif kind == "sweep":
        f = tmp_path / "sw.yaml"
        f.write_text(f"name: sw\nkind: diffusion\nconfig: {drun[0] / 'config.yaml'}\ngrid: {{training.lr: [0.001]}}\nseeds: [{BIG}]\n")
        args = ["sweep", str(f), "--out", str(tmp_path / "sw"), "--dry-run"]
    else:  # an edited sweep folder's sweep.yaml under `mosaic report`
        sw = tmp_path / "swr"
        (sw / "trials").mkdir(parents=True)
        f = sw / "sweep.yaml"
        f.write_text(f"name: sw\nkind: diffusion\nconfig: x.yaml\nseeds: [{BIG}]\n")
        (sw / "results.csv").write_text("trial,status,seed\n")
        args = ["report", str(sw)]
    r = runner.invoke(app, args)
    _clean_exit_2(r, f.name)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists()


def test_a_json_integer_longer_than_python_converts_is_named_in_folders(made, drun, tmp_path):
    """The same number in a manifest, a folder to evaluate's records and a run's records: named, exit 2."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    p = ds / "manifest.json"
    p.write_text(p.read_text().replace('"seed": 0', f'"seed": {BIG}', 1))
    _clean_exit_2(runner.invoke(app, ["verify", str(ds)]), "manifest.json is damaged")
    with pytest.raises(DatasetError, match="manifest.json is damaged"):
        MosaicDataset(ds, "train")

    def edit(rec):
        if rec["concepts"]["count"] == 1:
            rec["concepts"]["count"] = 0

    ev = _folder_to_score(made, tmp_path, edit)
    m = ev / "metadata.jsonl"
    m.write_text(m.read_text().replace('"count": 0', f'"count": {BIG}', 1))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0"]), "metadata.jsonl line 1")

    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    (run / "run.json").write_text(f'{{"id": "x", "zz": {BIG}}}\n')
    _clean_exit_2(runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "s")]), "run.json is damaged")
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------
# class 5: bounds before decode (PNG ancillary chunks, TIFF pages)
# ------------------------------------------------------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    import struct
    import zlib

    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


@pytest.mark.parametrize("kind, head", [(b"zTXt", b"k\0\0"), (b"iCCP", b"p\0\0"), (b"iTXt", b"k\0\1\0\0\0")], ids=["ztxt", "iccp", "itxt"])
def test_a_text_or_profile_chunk_bomb_in_an_image_to_score_is_named(made, tmp_path, kind, head):
    """A 16 px PNG carrying 8 KB of zlib that inflates to 8 MB in a text or colour-profile chunk: named
    (Pillow's text bound), exit 2, never a traceback or 8 MB held per image."""
    import zlib

    ev = _folder_to_score(made, tmp_path, lambda rec: None)
    p = ev / "images" / "000000.png"
    b = p.read_bytes()
    p.write_bytes(b[:33] + _chunk(kind, head + zlib.compress(b"\0" * (8 << 20), 9)) + b[33:])
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0"]), "000000.png", "not a readable image")


def test_a_tiff_whose_page_chain_loops_is_read_once(made, tmp_path):
    """A TIFF whose first IFD's next-IFD offset points at itself (an endless page chain): read as the one
    image it is, no hang."""
    import io
    import struct

    from PIL import Image

    ev = _folder_to_score(made, tmp_path, lambda rec: None)
    p = ev / "images" / "000000.png"
    buf = io.BytesIO()
    Image.open(p).convert("RGB").save(buf, format="TIFF")
    t = bytearray(buf.getvalue())
    off = struct.unpack("<I", t[4:8])[0]
    nxt = off + 2 + 12 * struct.unpack("<H", t[off:off + 2])[0]
    t[nxt:nxt + 4] = struct.pack("<I", off)
    p.write_bytes(bytes(t))
    r = subprocess.run([sys.executable, "-m", "mosaic.cli", "evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode in (0, 2) and "Traceback" not in r.stdout + r.stderr, r.stderr[-2000:]


# ------------------------------------------------------------------------------------------------
# class 1 / 7: readers that hold what they checked; config claims
# ------------------------------------------------------------------------------------------------

def test_a_dataset_reader_keeps_the_images_it_checked_when_a_file_is_replaced_after(made, tmp_path):
    """An image overwritten with another sample's bytes after ``MosaicDataset`` opened the split: the reader
    serves the bytes it checked (read eagerly under the shared lock), never the new file."""
    import numpy as np

    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    data = MosaicDataset(ds, "train")
    before = np.asarray(data[0]["image"]).copy()
    (ds / "train" / "images" / "000000.png").write_bytes((ds / "train" / "images" / "000001.png").read_bytes())
    assert (np.asarray(data[0]["image"]) == before).all()


@pytest.mark.parametrize("edit, said", [
    (lambda c: c["dataset"].update(overrides={"splits.train": 30}), "dataset.overrides apply to dataset.spec only"),
    (lambda c: c["dataset"].update(spec="x.yaml"), "give exactly one of dataset.path"),
], ids=["overrides_with_path", "path_and_spec"])
def test_a_config_naming_a_dataset_path_with_overrides_or_a_spec_is_refused(drun, tmp_path, edit, said):
    """``dataset.path`` with ``dataset.overrides`` (which would be ignored: the run trains on the dataset as it
    is while its config.yaml records the overrides) or with ``dataset.spec``: refused, nothing written."""
    import yaml

    c = yaml.safe_load((drun[0] / "config.yaml").read_text())
    c["out"] = str(tmp_path / "run")
    edit(c)
    f = tmp_path / "cfg.yaml"
    f.write_text(yaml.safe_dump(c))
    _clean_exit_2(runner.invoke(app, ["train", "diffusion", str(f), "--dry-run"]), said)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["value", "key"])
def test_a_lone_surrogate_in_a_record_to_score(made, tmp_path, where):
    """``"red\\ud800"`` as an intended value is named as no value of the concept; an extra key holding one
    is ignored, and the predictions are written (JSON escapes it)."""
    def edit(rec):
        if rec["concepts"]["count"] == 1:
            if where == "value":
                rec["concepts"]["color"] = rec["concepts"]["color"] + "\ud800"
            else:
                rec["note\ud800"] = "x"

    ev = _folder_to_score(made, tmp_path, edit)
    out = tmp_path / "out"
    r = runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0", "-o", str(out)])
    if where == "value":
        _clean_exit_2(r, "is not a value of the concept")
        assert not out.exists()
    else:
        assert r.exit_code == 0, r.output
        assert len((out / "predictions.jsonl").read_text().splitlines()) == 3


def test_an_audit_stops_while_another_process_writes_its_folder(tmp_path):
    from tests.conftest import hold_lock
    from tests.test_audit import scored_folder

    root = tmp_path / "run"
    scored_folder(root / "samples" / "a", n=6)
    (root / "config.yaml").write_text("name: r\n")
    p = hold_lock(root / "audit")
    try:
        r = runner.invoke(app, ["audit", str(root), "--n", "4"])
    finally:
        p.kill()
        p.wait()
    _clean_exit_2(r, "another process", "audit folder")
    assert not (root / "audit").exists()
    assert runner.invoke(app, ["audit", str(root), "--n", "4"]).exit_code == 0


_CARD_SNIPPET = r'''
import json, os, re, shutil, sys
from pathlib import Path
import numpy as np
from PIL import Image
from mosaic.dataset import generate
from mosaic.spec import parse_spec
import yaml

spec_path, a, b = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def card_load(path):
    """Run the card's own loading example (its first python block) on ``path``."""
    text = (path / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1).replace('"PATH"', repr(str(path)))
    scope = {}
    exec(code, scope)
    return scope["ds"]

generate(parse_spec(yaml.safe_load(spec_path.read_text())), a)
card_load(a)                                   # A loaded once, as its card says
shutil.copytree(a, b)                          # a copy of A (same folder name, another parent)
card_load(b)
data = yaml.safe_load(spec_path.read_text())
data["seed"] = 9
generate(parse_spec(data), a, overwrite=True)  # A regenerated with another seed
ds = card_load(b)                              # B is untouched: it must give its own images
got = np.asarray(ds["train"][0]["image"].convert("RGB"))
own = np.asarray(Image.open(b / "train" / "images" / "000000.png").convert("RGB"))
caption = json.loads((b / "train" / "metadata.jsonl").read_text().splitlines()[0])["caption"]
print(json.dumps({"own_image": bool((got == own).all()), "own_caption": ds["train"][0]["caption"] == caption}))
'''


def test_the_cards_loading_example_on_a_copied_dataset_gives_its_own_images(made, tmp_path):
    """Dataset A loaded as its card says (``datasets.load_dataset("PATH")``), copied to ``p2/ds`` (B, the same
    folder name), B loaded the same way; then A regenerated with another seed. B's files are untouched, but
    its card's example serves the cache entry of A: image paths inside A (regenerated: another scene) with
    B's labels. ``mosaic.hf_load.load_dataset`` keys the cache by location and is right; the card teaches
    the plain call (``mosaic.hf.card_text``)."""
    pytest.importorskip("datasets")
    a, b = tmp_path / "p1" / "ds", tmp_path / "p2" / "ds"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", _CARD_SNIPPET, str(made[0]), str(a), str(b)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"own_image": True, "own_caption": True}


def test_an_evaluator_retrain_never_writes_through_links_at_its_log_or_report(made, ev_dir, tmp_path):
    """An evaluator folder of mosaic's own whose ``train_log.jsonl`` and ``report.json`` are links to a
    person's file: a retrain replaces the links, the file keeps its bytes."""
    ev = tmp_path / "ev"
    shutil.copytree(ev_dir, ev)
    victim = tmp_path / "notes.txt"
    victim.write_text("precious")
    for name in ("train_log.jsonl", "report.json"):
        (ev / name).unlink()
        os.symlink(victim, ev / name)
    r = runner.invoke(app, ["evaluator", "train", str(made[0]), "--out", str(ev), "--steps", "1", "--n-train", "4", "--check-n", "0"])
    assert r.exit_code == 0, r.output
    assert victim.read_text() == "precious"
    assert not (ev / "train_log.jsonl").is_symlink() and not (ev / "report.json").is_symlink()


def test_a_resume_never_writes_through_a_linked_parts_folder(tmp_path):
    """An unfinished dataset whose ``.mosaic`` folder (the part files) is a link to another folder: the rerun
    finishes and the link's target keeps every file as it was."""
    import hashlib

    import yaml

    from tests.test_attack_cases5 import interrupted_generation
    from tests.test_diffusion import SPEC as D_SPEC

    base = tmp_path / "g"
    base.mkdir()
    _, ds, _ = interrupted_generation(base)
    victim = tmp_path / "victim"
    shutil.move(str(ds / ".mosaic"), str(victim))
    (victim / "keep.txt").write_text("keep")
    os.symlink(victim, ds / ".mosaic")

    def tree(r):
        return {p.relative_to(r).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(r.rglob("*")) if p.is_file()}

    before = tree(victim)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(D_SPEC))
    r = runner.invoke(app, ["generate", str(spec), "--out", str(ds)])
    assert r.exit_code == 0, r.output
    assert tree(victim) == before
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0


def test_a_copied_finished_run_is_named_by_its_own_folder(drun, tmp_path):
    """A finished run copied to another folder (its config's ``out`` set to the copy): ``mosaic train`` prints
    the path metrics.json recorded, the original's, and tells the person to delete *its* DONE file; the
    samples path it prints is the original's too (``mosaic.cli.train``: ``metrics['run']``)."""
    run = tmp_path / "copy"
    shutil.copytree(drun[0], run, symlinks=True)
    cfg = run / "config.yaml"
    cfg.write_text("\n".join(f"out: {run}" if ln.startswith("out:") else ln for ln in cfg.read_text().splitlines()) + "\n")
    r = runner.invoke(app, ["train", "diffusion", str(cfg)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "already done" in text
    assert str(drun[0]) not in text and str(run) in text


@pytest.mark.parametrize("what", ["run_manifest_copy", "run_folder", "damaged_dataset"])
def test_a_stream_refuses_what_is_no_undamaged_dataset(made, drun, tmp_path, what):
    """``StreamingDataset`` given a run's ``dataset_manifest.json`` (a copy, not a dataset), a run folder, or a
    dataset holding a stray file: named, never a stream of some spec."""
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset

    if what == "run_manifest_copy":
        path, said = drun[0] / "dataset_manifest.json", "looks like a dataset manifest"
    elif what == "run_folder":
        path, said = drun[0], "training run folder"
    else:
        ds = _copy(made, tmp_path)
        (ds / "train" / "images" / "notes.txt").write_text("x")
        path, said = ds / "manifest.json", "stray"
    with pytest.raises(MosaicError, match=said):
        StreamingDataset(path, "train")


def test_sample_writes_into_the_run_whatever_its_config_out_says(drun, tmp_path):
    """A run whose ``config.yaml`` ``out`` was edited to another folder: ``mosaic sample RUN`` writes the
    samples into RUN/samples, nothing into the folder the config names."""
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    shutil.rmtree(run / "samples")
    other = tmp_path / "elsewhere"
    other.mkdir()
    cfg = run / "config.yaml"
    cfg.write_text("\n".join(f"out: {other}" if ln.startswith("out:") else ln for ln in cfg.read_text().splitlines()) + "\n")
    r = runner.invoke(app, ["sample", str(run)])
    assert r.exit_code == 0, r.output
    assert list(other.iterdir()) == [] and len(list((run / "samples").iterdir())) == 1


def test_an_audit_import_with_an_id_longer_than_python_converts_is_named(tmp_path):
    from mosaic.audit import make_audit
    from tests.test_audit import scored_folder

    root = tmp_path / "run"
    scored_folder(root / "samples" / "a", n=6)
    (root / "config.yaml").write_text("name: r\n")
    make_audit(root, n=4, seed=0)
    items = json.loads((root / "audit" / "items.json").read_text())
    marks = [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": it["verdict"], "mark": "correct"}
             for it in items["items"]]
    text = json.dumps({"version": 1, "audit_id": items["meta"]["audit_id"], "marks": marks})
    saved = tmp_path / "dl.json"
    saved.write_text(text.replace(f'"id": {marks[0]["id"]}', f'"id": {BIG}', 1))
    _clean_exit_2(runner.invoke(app, ["audit", str(root), "--import", str(saved)]), "cannot be read as JSON")
    assert not (root / "audit" / "audit.json").exists()
