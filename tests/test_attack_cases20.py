"""Hostile cases of a twentieth attack on the data path (issue 23).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack20: ...")``:

- data lost: ``mosaic sample`` made again (same settings) into a samples folder deletes what a person
  put *inside* its ``images/`` (a photo, a folder of their own, a dot-file), exit 0: the foreign-name
  check before the folder is replaced whole looks at the top level only
  (``mosaic.lab.diffusion.scoring``: ``SAMPLES_NAMES`` against ``os.listdir(out)``);
- claims believed: an autoencoder's ``check-<key>.json`` edited to ``"passed": true`` is believed although its
  own accuracies are below its own threshold (``mosaic.lab.autoencoder_files.read_check`` checks only the
  weights' and config's sha256 and that ``passed`` is a boolean), so ``refuse_unless_passed`` lets an
  autoencoder that failed its check be used for latent diffusion;
- data lost: ``mosaic autoencoder train --out DIR`` replaces a person's ``DIR/vae/`` whole and discards their
  ``DIR/partial/`` (``mosaic.lab.autoencoder._train``: ``atomic_dir(out / "vae")``, ``discard(partial)``; no
  foreign-file check as ``evaluator train`` and ``train`` have);
- data lost: ``mosaic evaluator check SPEC --json SPEC`` writes its JSON report over its own input spec, exit 0
  (``mosaic.cli.common.check_out`` with ``kind="file"`` checks only that the path is writable).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import QUICK_SAMPLE, clean_exit_2

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def made_pq(made, tmp_path_factory):
    """The module's tiny dataset exported to Parquet: ``(imagefolder, parquet)``."""
    out = tmp_path_factory.mktemp("a20pq") / "dsp"
    r = runner.invoke(app, ["export", str(made[1]), "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return made[1], out


# ------------------------------------------------------------------------------------------------
# readers: unusual split names and ranges
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("split", ["../train", "train/", "TRAIN", "test", "train\x00", "./train", "", 5, ["train"]])
@pytest.mark.parametrize("reader", ["MosaicDataset", "StreamingDataset"])
@pytest.mark.parametrize("form", ["imagefolder", "parquet"])
def test_a_reader_refuses_a_split_name_that_is_not_the_datasets(made_pq, reader, form, split):
    """A split name that would be joined to the dataset folder (``../train``, ``train/``, a NUL) or is of
    another type is a named :class:`DatasetError`, listing the splits; never a path read."""
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    root = made_pq[0] if form == "imagefolder" else made_pq[1]
    cls = MosaicDataset if reader == "MosaicDataset" else StreamingDataset
    with pytest.raises(DatasetError, match="has no split"):
        cls(root, split)


@pytest.mark.parametrize("kw, said", [
    (dict(start=-1), "outside split"), (dict(stop=10**6), "outside split"), (dict(start=5, stop=2), "outside split"),
    (dict(start=10**30), "outside split"), (dict(rank=0, world_size=0), "world_size"), (dict(rank=3, world_size=2), "rank"),
    (dict(rank=-1, world_size=2), "rank"), (dict(start=True), "integer"), (dict(stop=2.5), "integer"),
])
def test_a_stream_refuses_a_range_or_rank_outside_its_split(made, kw, said):
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset

    with pytest.raises(DatasetError, match=said):
        list(StreamingDataset(made[1], "train", **kw))


# ------------------------------------------------------------------------------------------------
# export: hostile destinations
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["source", "inside", "parent", "link_to_dataset", "link_to_empty"])
def test_an_export_never_writes_into_its_source_its_parent_or_through_a_link(made, made_pq, tmp_path, case):
    src = tmp_path / "par" / "ds"
    shutil.copytree(made[1], src)
    other = tmp_path / "other"
    shutil.copytree(made[1], other)
    empty = tmp_path / "empty"
    empty.mkdir()
    before = {p: _tree(p) for p in (src, other)}
    args = {
        "source": [str(src), "--format", "parquet", "--out", str(src), "--overwrite"],
        "inside": [str(src), "--format", "parquet", "--out", str(src / "train" / "sub")],
        "parent": [str(src), "--format", "parquet", "--out", str(src.parent), "--overwrite"],
        "link_to_dataset": [str(made_pq[1]), "--format", "imagefolder", "--out", str(tmp_path / "lnk"), "--overwrite"],
        "link_to_empty": [str(src), "--format", "parquet", "--out", str(tmp_path / "lnk2")],
    }[case]
    os.symlink(other, tmp_path / "lnk")
    os.symlink(empty, tmp_path / "lnk2")
    _clean_exit_2(runner.invoke(app, ["export", *args]), "--out")
    assert {p: _tree(p) for p in (src, other)} == before
    assert sorted(os.listdir(src.parent)) == ["ds"] and os.listdir(empty) == []
    assert os.path.islink(tmp_path / "lnk") and os.path.islink(tmp_path / "lnk2")


@pytest.mark.parametrize("name", ["../evil.parquet", "/tmp/a20-evil.parquet", "sub/train-00000-of-00001.parquet",
                                  "data/../data/train-00000-of-00001.parquet", "train-00000-of-00001.parquet\x00"])
def test_a_repair_of_a_parquet_manifest_naming_a_shard_outside_data_writes_nothing(made_pq, tmp_path, name):
    """A shard record whose ``name`` leaves ``data/`` (or holds a NUL): ``verify --repair`` names the
    manifest as damaged, exit 2, and writes no shard anywhere."""
    from mosaic.manifest_io import manifest_text

    ds = tmp_path / "d" / "dsp"
    shutil.copytree(made_pq[1], ds)
    p = ds / "manifest.json"
    m = json.loads(p.read_text())
    m["shards"]["train"][0]["name"] = name
    p.write_text(manifest_text(m))
    (ds / "data" / "train-00000-of-00001.parquet").unlink()  # so a repair would write it
    before = _tree(tmp_path)
    _clean_exit_2(runner.invoke(app, ["verify", str(ds), "--repair"]), "manifest.json", "shard 0 of split 'train'")
    assert _tree(tmp_path) == before and not Path("/tmp/a20-evil.parquet").exists()


# ------------------------------------------------------------------------------------------------
# evaluate: edited samples folders, --set on a dataset
# ------------------------------------------------------------------------------------------------

def _samples_copy(drun, tmp_path) -> Path:
    run, _ = drun
    (src,) = [p for p in (run / "samples").iterdir() if p.is_dir()]
    out = tmp_path / "s"
    shutil.copytree(src, out)
    return out


@pytest.mark.parametrize("edit, said", [
    ("dup", "names the same image as line 1"),
    ("dup_index", "names the same image as line 1"),
    ("held_flip", "held_out is true"),
    ("foreign_value", "is not a value of the concept"),
])
def test_evaluate_refuses_an_edited_samples_folders_records(drun, tmp_path, edit, said):
    s = _samples_copy(drun, tmp_path)
    p = s / "metadata.jsonl"
    rows = [json.loads(line) for line in p.read_text().splitlines()]
    if edit == "dup":
        rows.append(dict(rows[0]))
    elif edit == "dup_index":
        rows.append({**rows[0], "index": len(rows)})
    elif edit == "held_flip":
        first_seen = next(r for r in rows if r["held_out"] is False)
        first_seen["held_out"] = True
    else:
        rows[0]["concepts"]["color"] = "purple"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["evaluate", str(s), "--spec", str(drun[1]), "--out", str(tmp_path / "ev"), "--check-n", "0"])
    _clean_exit_2(r, said)
    assert not (tmp_path / "ev" / "metrics.json").exists()


@pytest.mark.parametrize("split, override, said", [
    ("test_id", "holdout.rule.n=2", "held_out is false"),
    ("train", "holdout.rule.n=2", "held_out is false"),
    ("test_ood", "concepts.color.values=[green,red,blue]", "concepts differ"),
    ("test_ood", "image.size=32", "draws them otherwise"),
])
def test_evaluate_of_a_split_with_a_set_that_changes_its_spec_is_refused(made, split, override, said):
    _clean_exit_2(runner.invoke(app, ["evaluate", str(made[1] / split), "--set", override, "--check-n", "0"]), said)


def test_a_learned_evaluators_inflated_report_is_never_shown_as_checked(made, tmp_path):
    """``report.json`` edited to 100 % everywhere and ``--check-n 0``: the scores are flagged as measured by
    an unchecked evaluator, never as checked at the saved figure."""
    import yaml

    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec
    from tests.conftest import TINY_COUNT_SPEC

    ev = tmp_path / "ev"
    train_evaluator(parse_spec(yaml.safe_load(TINY_COUNT_SPEC)), ev,
                    LearnedConfig(steps=2, batch_size=4, n_train=8, check_n=8, input_size=16, width=4, threads=1))
    p = ev / "report.json"
    rep = json.loads(p.read_text())

    def up(d):
        if isinstance(d, dict):
            for k, v in d.items():
                if isinstance(v, float) and ("acc" in k or k in ("color", "count")):
                    d[k] = 1.0
                else:
                    up(v)
        elif isinstance(d, list):
            for v in d:
                up(v)

    up(rep)
    p.write_text(json.dumps(rep, indent=2))
    r = runner.invoke(app, ["evaluate", str(made[1] / "test_ood"), "-e", str(ev), "--check-n", "0"])
    assert r.exit_code == 0, r.output
    assert "FLAGGED" in r.output and "not checked" in r.output, r.output


# ------------------------------------------------------------------------------------------------
# sample / analyze on edited run folders and hostile --out
# ------------------------------------------------------------------------------------------------

_SAMPLE = QUICK_SAMPLE


@pytest.mark.parametrize("where, said", [
    ("run", "training run folder"), ("run/checkpoints", "the weights of the training run"),
    ("run/best", "the weights of the training run"), ("data", "is the mosaic dataset"), ("data/train", "lies inside the mosaic dataset"),
])
def test_sample_out_never_names_the_run_its_weights_or_a_dataset(drun, tmp_path, where, said):
    run, data = drun
    base = {"run": run, "data": data}[where.split("/")[0]]
    out = base.joinpath(*where.split("/")[1:])
    before = {p: _tree(p) for p in (run, data)}
    _clean_exit_2(runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)]), said)
    assert {p: _tree(p) for p in (run, data)} == before


def test_sample_again_into_a_folder_holding_a_persons_top_level_file_keeps_it(drun, tmp_path):
    run, _ = drun
    out = tmp_path / "victim"
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    assert r.exit_code == 0, r.output
    (out / "notes.md").write_text("mine")
    _clean_exit_2(runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)]), "notes.md")
    assert (out / "notes.md").read_text() == "mine"


@pytest.mark.parametrize("mine", ["images/photo.jpg", "images/mine/a.png", "images/.notes", "images/999999.png"])
def test_sample_again_never_deletes_a_persons_files_inside_the_samples_images(drun, tmp_path, mine):
    """``mosaic sample RUN --out S`` made again with the same settings replaces S whole: a person's
    ``images/photo.jpg`` (or a folder of theirs there) was deleted with it, exit 0. It must be refused, naming it,
    as a person's ``notes.md`` at the top level is."""
    run, _ = drun
    out = tmp_path / "victim"
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    assert r.exit_code == 0, r.output
    f = out / mine
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"mine")
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    assert f.exists() and f.read_bytes() == b"mine", r.output
    _clean_exit_2(r, Path(mine).name if not mine.startswith("images/mine") else "mine")


def test_analyze_names_a_metrics_file_that_is_no_mapping(drun, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    (run / "metrics.json").write_text("[]")
    _clean_exit_2(runner.invoke(app, ["analyze", str(run), "--what", "probes", "--device", "cpu"]), "metrics.json", "not a JSON mapping")
    assert (run / "metrics.json").read_text() == "[]"


# ------------------------------------------------------------------------------------------------
# autoencoder: its saved check
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ae20(tmp_path_factory):
    from tests.conftest import tiny_autoencoder

    return tiny_autoencoder(tmp_path_factory, "ae20", steps=3)


def test_an_autoencoder_check_edited_to_passed_is_never_believed(ae20, tmp_path):
    """A check at threshold 0.9 fails (parser accuracy 0 % on the 3-step autoencoder); its
    ``check-<key>.json`` edited to ``"passed": true`` (weights and config untouched, so both sha256 agree)
    was returned as passed and ``refuse_unless_passed`` let the autoencoder through. A record whose
    ``passed`` contradicts its own accuracies and threshold is damaged: measured again, or refused."""
    from mosaic.errors import MosaicError
    from mosaic.lab.autoencoder import check_key, checked, refuse_unless_passed

    src, sec, spec, _ = ae20
    sec = sec.model_copy(update={"threshold": 0.9})
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    res = checked(f, sec, spec, say=lambda m: None)
    assert res["passed"] is False and min(res["accuracy"].values()) < 0.9
    p = f / f"check-{check_key(sec, spec)}.json"
    d = json.loads(p.read_text())
    d["passed"] = True
    p.write_text(json.dumps(d))
    res = checked(f, sec, spec, say=lambda m: None)
    with pytest.raises(MosaicError):
        refuse_unless_passed(res, f)


# ------------------------------------------------------------------------------------------------
# HTML: an audit page of a samples folder with a hostile name
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["</script><script>alert(1)</script>", "<!--<script>", '"><img src=x onerror=alert(1)>',
                                  "]]></style><script>x</script>"])
def test_an_audit_page_of_a_hostile_samples_folder_name_holds_only_its_own_scripts(tmp_path, name):
    html5lib = pytest.importorskip("html5lib")
    from tests.test_audit import scored_folder

    root = tmp_path / "run"
    scored_folder(root / "samples" / name.replace("/", "\u2215"))
    r = runner.invoke(app, ["audit", str(root)])
    assert r.exit_code == 0, r.output
    page = (root / "audit" / "audit.html").read_bytes()
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    scripts = doc.findall(".//script")
    assert len(scripts) == 2 and all(s.get("src") is None for s in scripts)
    assert scripts[0].text.lstrip().startswith("{") and "alert" not in scripts[1].text
    assert not any(el.get("onerror") for el in doc.iter() if hasattr(el, "get"))


# ------------------------------------------------------------------------------------------------
# sweep: an edited results table, trial folders swapped
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-trial sweep (2 training steps each)."""
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a20sw")


def test_a_report_and_a_rerun_never_take_an_edited_results_table(swept, tmp_path):
    import pandas as pd

    p, out = swept
    sw = tmp_path / "sw"
    shutil.copytree(out, sw, symlinks=True)
    truth = pd.read_csv(sw / "results.csv")[["trial", "seen.joint", "held_out.joint"]]
    d = pd.read_csv(sw / "results.csv")
    d["held_out.joint"] = 0.987654
    d.to_csv(sw / "results.csv", index=False)
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    assert "98.77" not in (sw / "report" / "index.html").read_text() and "0.987654" not in (sw / "report" / "index.html").read_text()
    r = runner.invoke(app, ["sweep", str(p), "--out", str(sw), "--no-report"])
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(pd.read_csv(sw / "results.csv")[["trial", "seen.joint", "held_out.joint"]], truth)


def test_a_sweep_rerun_refuses_trial_folders_swapped_between_trials(swept, tmp_path):
    p, out = swept
    sw = tmp_path / "sw"
    shutil.copytree(out, sw, symlinks=True)
    a, b = sorted((sw / "trials").iterdir())
    a.rename(sw / "x")
    b.rename(a)
    (sw / "x").rename(b)
    _clean_exit_2(runner.invoke(app, ["sweep", str(p), "--out", str(sw), "--no-report"]), "another config", "training.lr")


# ------------------------------------------------------------------------------------------------
# writers over a person's files: the autoencoder folder, --json over the input, a train --out
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mine", ["vae/notes.txt", "partial/notes.txt"])
def test_an_autoencoder_trained_into_a_folder_never_deletes_a_persons_files(tmp_path, mine):
    """``mosaic autoencoder train --out DIR`` (or ``train_autoencoder``) where DIR holds a person's ``vae/`` or
    ``partial/`` folder: ``vae/`` is replaced whole (``atomic_dir``) and ``partial/`` discarded after training,
    their files deleted, exit 0 when the check passes. ``mosaic evaluator train --out`` and ``mosaic train``
    refuse such a folder, naming the files; so must the autoencoder, before anything is trained."""
    from mosaic.errors import MosaicError
    from mosaic.lab.autoencoder import AutoencoderSection, train_autoencoder
    from mosaic.spec import parse_spec
    from tests.test_latent import SPEC as L_SPEC

    out = tmp_path / "mydir"
    f = out / mine
    f.parent.mkdir(parents=True)
    f.write_text("mine")
    sec = AutoencoderSection(factor=4, block_out_channels=[8, 16, 16], norm_num_groups=4, steps=1, batch_size=4, check_n=2,
                             device="cpu", threshold=0)
    try:
        train_autoencoder(sec, parse_spec(L_SPEC), out, say=lambda m: None, progress=False)
    except MosaicError as e:
        assert Path(mine).parts[0] in str(e)
    assert f.is_file() and f.read_text() == "mine"


def test_evaluator_check_never_writes_its_json_report_over_its_own_spec(made, tmp_path):
    """``mosaic evaluator check SPEC --json SPEC``: the person's spec is replaced by the JSON report, exit 0.
    An output that is the command's own input is refused (as ``export --out SRC`` is), naming ``--json``."""
    spec = tmp_path / "spec.yaml"
    shutil.copy(made[0], spec)
    before = spec.read_bytes()
    r = runner.invoke(app, ["evaluator", "check", str(spec), "--n", "4", "--json", str(spec)])
    assert spec.read_bytes() == before, r.output
    _clean_exit_2(r, "--json")


def _in_dataset_or_run(made, drun, tmp_path, where: str):
    """A copy of the dataset and the run; the path ``where`` (``ds/...`` or ``run/...``) in them; their files now."""
    ds = tmp_path / "ds"
    shutil.copytree(made[1], ds)
    run = drun[0]
    return ds, run, {"ds": ds, "run": run}[where.split("/")[0]].joinpath(*where.split("/")[1:]), {p: _tree(p) for p in (ds, run)}


@pytest.mark.parametrize("where, said", [("ds/manifest.json", "is the mosaic dataset"), ("ds/train/x.json", "lies inside the mosaic dataset"),
                                         ("run/metrics.json", "training run folder")])
def test_evaluator_check_json_never_lands_in_a_dataset_or_a_run(made, drun, tmp_path, where, said):
    ds, run, target, before = _in_dataset_or_run(made, drun, tmp_path, where)
    _clean_exit_2(runner.invoke(app, ["evaluator", "check", str(made[0]), "--n", "4", "--json", str(target)]), "--json", said)
    assert {p: _tree(p) for p in (ds, run)} == before


@pytest.mark.parametrize("where", ["ds", "ds/train", "run", "run/best"])
@pytest.mark.parametrize("command", ["autoencoder", "evaluator"])
def test_an_autoencoder_or_evaluator_out_never_names_a_dataset_or_a_run(made, drun, tmp_path, where, command):
    ds, run, out, before = _in_dataset_or_run(made, drun, tmp_path, where)
    args = (["autoencoder", "train", str(made[0]), "--ae", "steps=1", "--ae", "device=cpu"] if command == "autoencoder"
            else ["evaluator", "train", str(made[0])])
    _clean_exit_2(runner.invoke(app, [*args, "--out", str(out)]), "--out")
    assert {p: _tree(p) for p in (ds, run)} == before


def test_report_and_analyze_keep_a_persons_files_in_their_folders(swept, tmp_path):
    """``report/`` and ``RUN/analysis/`` are written into, never replaced whole: a person's notes there stay."""
    _, out = swept
    sw = tmp_path / "sw"
    shutil.copytree(out, sw, symlinks=True)
    (sw / "report" / "mine").mkdir(parents=True)
    (sw / "report" / "notes.md").write_text("mine")
    (sw / "report" / "mine" / "a.txt").write_text("mine")
    run = sorted((sw / "trials").iterdir())[0] / "run"
    (run / "analysis").mkdir(exist_ok=True)
    (run / "analysis" / "notes.md").write_text("mine")
    assert runner.invoke(app, ["report", str(sw)]).exit_code == 0
    r = runner.invoke(app, ["analyze", str(run), "--what", "probes", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert (sw / "report" / "notes.md").read_text() == "mine" and (sw / "report" / "mine" / "a.txt").read_text() == "mine"
    assert (run / "analysis" / "notes.md").read_text() == "mine"


def test_train_into_a_folder_holding_a_persons_best_or_samples_is_refused(tmp_path):
    import yaml

    from tests.test_sweep_e2e import make_sweep

    make_sweep(tmp_path)
    out = tmp_path / "mydir"
    for rel in ("best/notes.txt", "final/notes.txt", "samples/mine/n.txt"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("mine")
    before = _tree(out)
    _clean_exit_2(runner.invoke(app, ["train", "diffusion", str(tmp_path / "train.yaml"), "--out", str(out)]), "not empty")
    assert _tree(out) == before
    assert yaml.safe_load((tmp_path / "train.yaml").read_text())["name"] == "t"
