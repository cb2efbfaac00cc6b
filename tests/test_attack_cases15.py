"""Hostile cases of a fifteenth attack on the data path (issue 23): inputs, folders to evaluate, sweeps.

What broke, and the mechanism that closes it:

- **A sweep wrote through links in its own folder**: ``prepare`` made ``trials/<id>`` with
  ``mkdir(parents=True)``, so a link planted at ``trials/`` (or at one trial's folder) had every
  trial's config, status and run written into the folder it points to.
  :func:`mosaic.trials._own_trial_folders` makes them real folders (a link removed, never followed),
  and removes a link at ``trials/<id>/run``; ``reproduce`` does the same for ``OUT/<sweep>``.
- **An image to score of several frames** (GIF, APNG, WebP, TIFF pages) was scored on its first frame
  alone, and a 16-bit PNG was clipped to white: :func:`mosaic.png.decode_image` refuses both by name.
- **An edited ``sweep.yaml``** whose ``report`` or ``grid`` is not a mapping was an AttributeError
  traceback under ``mosaic report``: :func:`mosaic.report.read_sweep_yaml` checks the shapes it reads.
- **``audit --seed -1``** was a numpy traceback: :func:`mosaic.audit.make_audit` names it.
- **A split folder given as a dataset** (``verify DS/train``) said to make a dataset there (which is
  refused): :func:`mosaic.records.no_manifest` names the dataset the folder lies in.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2, TINY_COUNT_SPEC

SPEC = TINY_COUNT_SPEC

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


# ------------------------------------------------------------------------------------------------
# (g) / (e) spec files and --set values
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, said", [
    (lambda t: t + "splits: {train: 800, val: 2, test_id: 3, test_ood: 3}\n", "names a key twice"),
    (lambda t: t.replace("range: [1, 3]", "range: [1, 1000000000]"), "at most 10,000"),
    (lambda t: t.replace("size: 16}", "size: 100000}"), "image.size"),
    (lambda t: t.replace("train: 8,", "train: 1000000000000,"), "splits.train"),
    (lambda t: "- a list\n", "a spec is a YAML mapping"),
])
def test_a_spec_that_repeats_a_key_or_asks_for_too_much_is_named(made, tmp_path, edit, said):
    """(g/e) A key given twice, a 10^9-value range, a 100,000 px image, 10^12 samples, a list: named, exit 2, nothing made."""
    p = tmp_path / "s.yaml"
    p.write_text(edit(SPEC))
    r = runner.invoke(app, ["generate", str(p), "--out", str(tmp_path / "out")])
    _clean_exit_2(r, said)
    assert not (tmp_path / "out").exists()


def test_a_spec_in_utf16_is_named_and_one_with_a_bom_is_read(tmp_path):
    """(g) A UTF-16 spec is named a binary file; a UTF-8 byte-order mark is read as the spec it precedes."""
    (tmp_path / "u16.yaml").write_bytes(SPEC.encode("utf-16"))
    _clean_exit_2(runner.invoke(app, ["validate", str(tmp_path / "u16.yaml")]), "NUL bytes")
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbf" + SPEC.encode())
    r = runner.invoke(app, ["validate", str(tmp_path / "bom.yaml")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("setting, said", [("a..b=1", "unknown field"), ("=1", "unknown field"), ("noequals", "is not key.path=value"),
                                           ("description=&a [*a]", "recursive YAML alias"),
                                           ('description=!!python/object/apply:os.system ["echo x"]', "python/object")])
def test_malformed_or_hostile_set_values_are_named(made, tmp_path, setting, said):
    """(g/b/e) A --set with an empty path part, no key, no '=', a recursive alias or a python tag: named, exit 2."""
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(tmp_path / "o"), "--set", setting])
    _clean_exit_2(r, said)
    assert not (tmp_path / "o").exists()


def _laughs(levels: int = 8) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("cmd, body", [(["train", "diffusion", "{p}"], "name: t\n"),
                                       (["sweep", "{p}", "--dry-run"], "name: s\nkind: diffusion\nconfig: x.yaml\n")])
def test_a_billion_laughs_training_config_or_sweep_file_is_refused(tmp_path, cmd, body):
    """(e) A "billion laughs" training config or sweep file: refused from its alias count, named, no hang."""
    p = tmp_path / "f.yaml"
    p.write_text(_laughs() + body)
    _clean_exit_2(runner.invoke(app, [a.format(p=p) for a in cmd]), "billion laughs")


def test_a_sweep_file_nested_100000_deep_is_named(tmp_path):
    """(e) A sweep file nested 100,000 deep: named, not a RecursionError."""
    p = tmp_path / "deep.yaml"
    p.write_text("a: " + "[" * 100000 + "]" * 100000 + "\n")
    _clean_exit_2(runner.invoke(app, ["sweep", str(p), "--dry-run"]), "nests deeper")


# ------------------------------------------------------------------------------------------------
# (g) paths: link loops, outputs under a file, split folders for datasets
# ------------------------------------------------------------------------------------------------

def test_a_symbolic_link_loop_as_any_path_is_named(made, tmp_path):
    """(g) A link pointing at itself given as dataset, spec, --out and folder to evaluate: named, exit 2."""
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for args in (["verify", str(loop)], ["validate", str(loop)], ["generate", str(made[0]), "--out", str(loop)],
                 ["generate", str(made[0]), "--out", str(loop / "x")], ["evaluate", str(loop), "--spec", str(made[1])]):
        r = runner.invoke(app, args)
        _clean_exit_2(r)
        assert "loop" in r.output


def test_an_output_under_a_regular_file_is_named_by_every_writer(made, tmp_path):
    """(g) --out under a regular file (generate, evaluate, splits, preview): named, the file kept."""
    f = tmp_path / "afile"
    f.write_text("mine")
    spec, ds = made
    for args in (["generate", str(spec), "--out", str(f / "sub")], ["evaluate", str(ds / "test_ood"), "--spec", str(ds), "-o", str(f / "sub")],
                 ["splits", str(spec), "--out", str(f / "x.png")], ["preview", str(spec), "--out", str(f / "x.png")]):
        _clean_exit_2(runner.invoke(app, args), "regular file")
    assert f.read_text() == "mine"


def test_a_split_folder_given_as_a_dataset_names_the_dataset_it_lies_in(made):
    """(h) verify / export / MosaicDataset of DS/train name DS (they said to generate a dataset into DS/train, which is refused)."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = made[1]
    for args in (["verify", str(ds / "train")], ["export", str(ds / "train"), "-f", "parquet", "--out", str(ds.parent / "pq")]):
        r = runner.invoke(app, args)
        _clean_exit_2(r, "a folder inside one", f"give the dataset's own folder {ds.resolve()}")
        assert "mosaic generate" not in r.output
    with pytest.raises(DatasetError, match="a folder inside one"):
        MosaicDataset(ds / "train", "train")


@pytest.mark.parametrize("split", ["../ds/train", "train/", "TRAIN", None, 3])
def test_a_split_name_that_is_no_split_is_named_by_the_readers(made, split):
    """(a) MosaicDataset / StreamingDataset given a split as a path, with a slash, in capitals or not a string: named."""
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError, match="has no split"):
        MosaicDataset(made[1], split)
    with pytest.raises(DatasetError, match="has no split"):
        StreamingDataset(made[1], split=split)


def test_a_dataset_of_another_spec_at_the_on_demand_folder_is_refused(made, tmp_path):
    """(a) A copy of another dataset planted at `<root>/<name>-<fingerprint>` of a config's spec: generate refuses it, naming both."""
    from mosaic.lab.data import dataset_dir_for
    from mosaic.spec import load_spec

    other = tmp_path / "s5.yaml"
    other.write_text(SPEC.replace("name: t\n", "name: t\nseed: 5\n"))
    dst = tmp_path / "roots" / dataset_dir_for(load_spec(other))
    shutil.copytree(made[1], dst)
    before = (dst / "manifest.json").read_bytes()
    _clean_exit_2(runner.invoke(app, ["generate", str(other), "--out", str(dst)]), "was generated from spec", "fingerprint")
    assert (dst / "manifest.json").read_bytes() == before


# ------------------------------------------------------------------------------------------------
# (a) / (e) a folder to evaluate: images of several frames or samples, odd formats, records
# ------------------------------------------------------------------------------------------------

def _eval_copy(made, tmp_path, write=None) -> Path:
    d = tmp_path / "ev"
    shutil.copytree(made[1] / "test_ood", d)
    if write is not None:
        write(d / "images" / "000000.png")
    return d


def _frames(p: Path, fmt: str) -> None:
    from PIL import Image

    first = Image.new("RGB", (16, 16), (30, 30, 30))
    rest = [Image.new("RGB", (16, 16), (200, 0, 0))] * 3
    first.save(p, format=fmt, save_all=True, append_images=rest)


@pytest.mark.parametrize("fmt", ["GIF", "PNG", "WEBP", "TIFF"])
def test_an_image_of_several_frames_is_refused_never_scored_on_its_first(made, tmp_path, fmt):
    """(a) An animated GIF / APNG / WebP or a multi-page TIFF to score: refused by name (it was scored on frame 1 alone, exit 0)."""
    d = _eval_copy(made, tmp_path, lambda p: _frames(p, fmt))
    r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0", "-o", str(tmp_path / "out")])
    _clean_exit_2(r, "000000.png", "several frames")
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_a_16_bit_image_to_score_is_refused_never_clipped_to_white(made, tmp_path):
    """(a) A 16-bit greyscale PNG read as 8-bit RGB saturated every value over 255: refused by name."""
    from PIL import Image

    a = (np.arange(256).reshape(16, 16) * 256).astype(np.uint16)
    d = _eval_copy(made, tmp_path, lambda p: Image.fromarray(a).save(p, format="PNG"))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0"]), "000000.png", "16- or 32-bit")


def test_a_single_frame_jpeg_or_webp_to_score_is_still_read(made, tmp_path):
    """(a) No false alarm: a one-frame JPEG and WebP (Pillow formats a model may write) are scored."""
    from PIL import Image

    for fmt in ("JPEG", "WEBP"):
        d = _eval_copy(made, tmp_path, lambda p: Image.new("RGB", (16, 16), "red").save(p, format=fmt))
        r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0"])
        assert r.exit_code == 0, r.output
        shutil.rmtree(d)


def test_a_tiff_claiming_ten_billion_pixels_and_an_icon_are_named(made, tmp_path):
    """(e/g) A 100,000 x 100,000 group-4 TIFF of a few KB: refused from its header; an ICO file: named, never a traceback."""
    from PIL import Image

    d = _eval_copy(made, tmp_path, lambda p: Image.new("1", (100000, 100000)).save(p, format="TIFF", compression="group4"))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0"]), "refused before decoding")
    shutil.rmtree(d)
    d = _eval_copy(made, tmp_path, lambda p: Image.new("RGB", (16, 16), "red").save(p, format="ICO"))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0"]), "not a readable image")


@pytest.mark.parametrize("edit, said", [
    (lambda r: r["concepts"].update(extra="x"), "cannot read concept(s) 'extra'"),
    (lambda r: r["concepts"].pop("color"), "concept 'color' is missing"),
    (lambda r: r["concepts"].update(color=["red"]), "is not a value of the concept"),
    (lambda r: r["concepts"].update(color={"a": 1}), "is not a value of the concept"),
    (lambda r: r.update(concepts=["red"]), "a 'concepts' mapping"),
])
def test_a_record_to_score_with_concepts_of_another_shape_is_named(made, tmp_path, edit, said):
    """(g) A record whose concepts add one, lack one, give a list or mapping, or are a list: named, exit 2."""
    d = tmp_path / "ev"
    d.mkdir()
    shutil.copytree(made[1] / "test_ood" / "images", d / "images")
    rows = [json.loads(x) for x in (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()]
    edit(rows[0])
    (d / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(d), "--spec", str(made[1]), "--check-n", "0"]), said)


# ------------------------------------------------------------------------------------------------
# (c) a sweep's and a reproduction's own folders
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def small_sweep(tmp_path):
    from mosaic.sweep import load_sweep
    from tests.test_sweep_e2e import make_sweep

    return load_sweep(make_sweep(tmp_path))


def test_a_sweep_never_writes_its_trials_through_a_link_at_trials(tmp_path, small_sweep):
    """(c) A link at SWEEP/trials: the trials were written into the folder it points to; now it is replaced by a real folder."""
    from mosaic.trials import prepare

    out, other = tmp_path / "sw", tmp_path / "other"
    out.mkdir()
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    os.symlink(other, out / "trials")
    trials = prepare(small_sweep, out)
    assert sorted(os.listdir(other)) == ["keep.txt"]
    assert not (out / "trials").is_symlink() and all((t["dir"] / "config.yaml").is_file() for t in trials)


def test_a_sweep_never_writes_through_a_link_at_a_trial_or_its_run(tmp_path, small_sweep):
    """(c) A link at trials/<id> (another sweep's trial) or at trials/<id>/run (another run): removed, the targets untouched."""
    from mosaic.trials import plan, prepare

    out = tmp_path / "sw"
    ids = [t["id"] for t in plan(small_sweep, out)]
    (out / "trials" / ids[1]).mkdir(parents=True)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "run.json").write_text("{}")
    os.symlink(a, out / "trials" / ids[0])
    os.symlink(b, out / "trials" / ids[1] / "run")
    trials = prepare(small_sweep, out)
    assert os.listdir(a) == [] and os.listdir(b) == ["run.json"]
    assert not (out / "trials" / ids[0]).is_symlink() and not os.path.lexists(out / "trials" / ids[1] / "run")
    cfg = yaml.safe_load((trials[1]["dir"] / "config.yaml").read_text())
    assert cfg["out"] == str((out / "trials" / ids[1] / "run").resolve())


def test_a_file_standing_at_trials_is_refused_by_name(tmp_path, small_sweep):
    """(c) A person's file named `trials` in the sweep folder: refused, never deleted."""
    from mosaic.errors import SweepError
    from mosaic.trials import prepare

    out = tmp_path / "sw"
    out.mkdir()
    (out / "trials").write_text("mine")
    with pytest.raises(SweepError, match="is not a folder"):
        prepare(small_sweep, out)
    assert (out / "trials").read_text() == "mine"


def test_a_reproduction_never_runs_a_sweep_into_a_linked_folder(tmp_path, monkeypatch):
    """(c) A link at OUT/<sweep> of a reproduction: removed before the sweep is prepared; the other folder untouched."""
    import mosaic.reproduce as R
    from tests.test_reproduce import tiny

    reg, sweeps = tiny(tmp_path)
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(R, "run_pool", stop)
    out, other = tmp_path / "out", tmp_path / "other"
    out.mkdir()
    other.mkdir()
    os.symlink(other, out / "tiny_cov")
    with pytest.raises(Stop):
        R.reproduce("toy", "cpu", out, workers=1)
    assert os.listdir(other) == [] and not (out / "tiny_cov").is_symlink() and (out / "tiny_cov" / "sweep.yaml").is_file()


# ------------------------------------------------------------------------------------------------
# (d) / (g) files that claim things: sweep.yaml under report, an evaluator's class names, audit options
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, said", [({"report": [1, 2]}, "report: Input should be a valid dictionary"),
                                        ({"report": {"x": [1], "y": 5}}, "report.x"),
                                        ({"report": {"claims": [5]}}, "report.claims"),
                                        ({"grid": "abc"}, "grid: a str")])
def test_report_names_a_sweep_file_whose_sections_are_of_another_shape(tmp_path, edit, said):
    """(d/g) An edited sweep.yaml whose report or grid is not the mapping sweep wrote: named, exit 2 (an AttributeError traceback)."""
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "fs", "kind": "diffusion", "config": "x.yaml", **edit}))
    (sw / "results.csv").write_text("trial,status,seed,held_out.joint,seen.joint\nt1,done,0,0.5,0.9\n")
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "sweep.yaml is damaged", said, "restore it")
    assert not (sw / "report" / "index.html").exists()


def test_report_still_writes_the_page_of_a_sweep_file_of_the_right_shape(tmp_path):
    """(d) No false alarm: a sweep.yaml with a report section and grid as sweep writes them gives the page."""
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "fs", "kind": "diffusion", "config": "x.yaml",
                                                   "grid": {"training.lr": [0.001]}, "report": {"y": ["seen.joint"]}}))
    (sw / "results.csv").write_text("trial,status,seed,training.lr,held_out.joint,seen.joint\nt1,done,0,0.001,0.5,0.9\n")
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    assert (sw / "report" / "index.html").is_file()


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("a15audit")
    scored_folder(root / "samples" / "test_ood_best")
    return root


@pytest.mark.parametrize("args, said", [(["--seed", "-1"], "--seed -1"), (["--n", "-5"], "--n -5"), (["--n", "0"], "--n 0")])
def test_audit_options_out_of_range_are_named(scored_run, tmp_path, args, said):
    """(g) `audit --seed -1` was a numpy ValueError traceback; --n below 1 is named too; nothing is written."""
    r = runner.invoke(app, ["audit", str(scored_run), *args, "--out", str(tmp_path / "aud")])
    _clean_exit_2(r, said)
    assert not (tmp_path / "aud").exists()


def test_audit_of_a_huge_n_or_seed_takes_every_item_once(scored_run, tmp_path):
    """(e) --n 10^12 and a seed of 10^23: the audit takes all 12 items (no allocation of 10^12), exit 0."""
    r = runner.invoke(app, ["audit", str(scored_run), "--n", str(10**12), "--seed", str(10**23), "--out", str(tmp_path / "aud")])
    assert r.exit_code == 0, r.output
    items = json.loads((tmp_path / "aud" / "items.json").read_text())["items"]
    assert len(items) == 12 and len({(i["source"], i["file_name"]) for i in items}) == 12


# ------------------------------------------------------------------------------------------------
# (f/g) text drawn on figures is never parsed as TeX
# ------------------------------------------------------------------------------------------------

DOLLAR = "$\\bad{$"


def test_a_colour_named_like_tex_draws_the_split_grid_and_the_heatmap(tmp_path):
    """(g) A spec-conformant colour named `$\\bad{$`: splits --out and evaluate's heatmap were a matplotlib ParseFatalException."""
    data = yaml.safe_load(SPEC)
    data["colors"] = {DOLLAR: [200, 10, 10]}
    data["concepts"]["color"]["values"][0] = DOLLAR
    spec = tmp_path / "d.yaml"
    spec.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["splits", str(spec), "--out", str(tmp_path / "g.png")])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["generate", str(spec), "--out", str(tmp_path / "ds")]).exit_code == 0
    r = runner.invoke(app, ["evaluate", str(tmp_path / "ds" / "test_ood"), "--spec", str(tmp_path / "ds"), "--check-n", "0",
                            "-o", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ev" / "heatmap.png").is_file()


@pytest.mark.parametrize("sweep", [{"grid": {"training.lr": [0.001, 0.002]}, "report": {"x_label": DOLLAR}},
                                   {"grid": {"training.lr": [0.001, 0.002], "label.model": [DOLLAR, "b"]}}])
def test_a_report_whose_labels_hold_dollars_is_written(tmp_path, sweep):
    """(g) report.x_label or a label axis value holding `$...$`: the curves were a ParseFatalException traceback."""
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "fs", "kind": "diffusion", "config": "x.yaml", **sweep}))
    rows = [{"trial": f"t{i}", "status": "done", "seed": 0, "training.lr": lr, "label.model": m, "held_out.joint": 0.5, "seen.joint": 0.9}
            for i, (lr, m) in enumerate([(0.001, DOLLAR), (0.002, "b")])]
    import pandas as pd

    pd.DataFrame(rows).to_csv(sw / "results.csv", index=False)
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    assert (sw / "report" / "curves.png").is_file()


def test_a_training_config_edited_while_a_sweep_is_planned_never_splits_its_trials(tmp_path, small_sweep, monkeypatch):
    """(c) The sweep's config was read again for every trial: an edit during planning gave trials two configs
    (and 100,000 trials parsed it 100,000 times). It is read once per plan."""
    import mosaic.lab.config as C
    import mosaic.sweep as S
    import mosaic.trials as T

    real = C.read_config_yaml
    calls = []

    def edited_after_first_read(path, *a, **k):
        data = real(path, *a, **k)
        if Path(path) == Path(small_sweep.config):
            calls.append(path)
            if len(calls) == 1:  # another process edits the file right after the first read
                raw = yaml.safe_load(Path(path).read_text())
                raw["training"]["batch_size"] = 2
                Path(path).write_text(yaml.safe_dump(raw))
        return data

    monkeypatch.setattr(T, "read_config_yaml", edited_after_first_read)
    monkeypatch.setattr(S, "read_config_yaml", edited_after_first_read)
    trials = T.plan(small_sweep, tmp_path / "sw")
    assert len(trials) == 4 and len(calls) == 1
    assert {t["cfg"].training.batch_size for t in trials} == {4}


@pytest.mark.parametrize("value", ["3", ""])
def test_a_number_outside_a_numeric_choice_names_the_choices(made, tmp_path, value):
    """(g) `--ae factor=3` said "3 is not one of " and nothing: the choices of a numeric Literal are named (2, 4, 8, 16)."""
    r = runner.invoke(app, ["autoencoder", "train", str(made[0]), "--ae", f"factor={value}", "--out", str(tmp_path / "ae")])
    _clean_exit_2(r, "autoencoder.factor", "is not one of 2, 4, 8, 16")
    assert not (tmp_path / "ae").exists()


def test_a_reproduction_never_deletes_a_file_standing_at_a_sweeps_folder(tmp_path, monkeypatch):
    """(c) A person's file named like a sweep in the reproduction folder: refused by name, kept (a link there is replaced)."""
    import mosaic.reproduce as R
    from mosaic.errors import SweepError
    from tests.test_reproduce import tiny

    reg, sweeps = tiny(tmp_path)
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny_cov").write_text("mine")
    with pytest.raises(SweepError, match="is not a folder"):
        R.reproduce("toy", "cpu", out, workers=1)
    assert (out / "tiny_cov").read_text() == "mine"


def test_a_file_standing_where_report_makes_its_folder_is_kept(tmp_path):
    """(c) A person's file named `report` in a sweep folder was deleted to make report/ (mosaic.io.own_folders): refused, kept."""
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "fs", "kind": "diffusion", "config": "x.yaml"}))
    (sw / "results.csv").write_text("trial,status,seed,held_out.joint,seen.joint\nt1,done,0,0.5,0.9\n")
    (sw / "report").write_text("my notes")
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "is a file where mosaic makes its folder report/")
    assert (sw / "report").read_text() == "my notes"
