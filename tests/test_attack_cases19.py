"""Hostile cases of a nineteenth attack on the data path (issue 23).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack19: ...")``:

- claims believed: an audit's ``items.json`` edited (1,000 invented items, or an item's verdict changed)
  is counted by ``audit --import`` / ``--summary`` (``mosaic.audit.audit_summary``, ``_audit_items``):
  nothing ties the items to the scored rows or to ``meta.audit_id``;
- outside files on a page: a symbolic link at a trial's ``run``, ``run/analysis`` or ``run/samples/<s>``
  has the report copy the linked folder's heatmaps, figures or images into ``report/``
  (``mosaic.report.write_report``, ``_sample_sheet``: ``read_own_file`` refuses a link only at the last name); a heatmap or figure that is no bounded PNG (a 60000 x 60000 px header, an
  SVG) is copied onto the page unchecked;
- tracebacks: a symbolic link at a trial's ``run/*heatmap*.png`` is an ELOOP OSError traceback, exit 1;
- half-written: ``mosaic train`` on a hard-linked copy of a dataset (``cp -al``, which ``verify`` calls
  OK) writes ``config.yaml``, ``dataset.json``, ``run.json``, then stops on ``dataset_manifest.json``
  ("a hard link, not a file of mosaic's own"); the rerun resumes and finishes a run without
  ``dataset_manifest.json`` (``mosaic.lab.run_folder.RunFolder`` / ``mosaic.io.atomic_copy``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import zlib
from functools import partial
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _png_header(w: int, h: int) -> bytes:
    """A small PNG whose header claims ``w`` x ``h`` RGB pixels (a decompression bomb's form)."""
    def ch(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + ch(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + ch(b"IDAT", zlib.compress(b"", 9)) + ch(b"IEND", b""))


# ------------------------------------------------------------------------------------------------
# class 4: claims checked -- an audit's items.json
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A scored samples folder (12 images) with its audit page made."""
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("a19audit") / "run"
    scored_folder(root / "samples" / "test_ood_best")
    r = runner.invoke(app, ["audit", str(root)])
    assert r.exit_code == 0, r.output
    return root


def _edit_items_and_mark_all(root: Path, tmp_path: Path, edit) -> Path:
    run = tmp_path / "run"
    shutil.copytree(root, run)
    p = run / "audit" / "items.json"
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d))
    marks = [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "mark": "correct"} for it in d["items"]]
    saved = tmp_path / "audit.json"
    saved.write_text(json.dumps({"audit_id": d["meta"]["audit_id"], "marks": marks}))
    return run, saved


def _inflate(d):
    it0 = d["items"][0]
    n = len(d["items"])
    d["items"] += [{**it0, "id": k, "file_name": f"images/invented{k}.png", "verdict": "right"} for k in range(n, n + 1000)]


def _flip_verdicts(d):
    for it in d["items"]:
        it["verdict"] = "right"


@pytest.mark.parametrize("edit", [_inflate, _flip_verdicts], ids=["1000-invented-items", "verdicts-flipped"])
def test_an_edited_audit_items_file_is_never_counted(audited, tmp_path, edit):
    """``items.json`` is the audit's claim of which scored images it shows and the evaluator's verdict of
    each. Edited (1,000 invented items appended, or every verdict set to ``right``) with ``meta.audit_id``
    kept, an ``audit.json`` marking them all is imported and summarised as 1012 of 1012 verdicts correct
    (or every verdict ``right``). The items must be the audit's own: each one a row of the scored
    ``predictions.jsonl`` with its verdict, and the id the one they give."""
    run, saved = _edit_items_and_mark_all(audited, tmp_path, edit)
    r = runner.invoke(app, ["audit", str(run), "--import", str(saved)])
    _clean_exit_2(r, "items.json")
    assert not (run / "audit" / "audit.json").exists()


def test_an_audit_import_of_its_own_marks_still_counts_them(audited, tmp_path):
    """No false alarm: the page's own items, every one marked, are imported and counted (12 of 12)."""
    run, saved = _edit_items_and_mark_all(audited, tmp_path, lambda d: None)
    r = runner.invoke(app, ["audit", str(run), "--import", str(saved)])
    assert r.exit_code == 0, r.output
    assert "12 of 12" in r.output


# ------------------------------------------------------------------------------------------------
# classes 2, 5, 6, 7: what a sweep report copies from its trials
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def sweep_folder(tmp_path):
    """A prepared sweep folder (4 trials, not run) and the run folder of its first trial."""
    from mosaic.sweep import load_sweep
    from mosaic.trials import prepare
    from tests.test_sweep_e2e import make_sweep

    sw = tmp_path / "sw"
    trials = prepare(load_sweep(make_sweep(tmp_path)), sw)
    run = trials[0]["dir"] / "run"
    run.mkdir(exist_ok=True)
    return sw, run


def test_a_report_never_takes_a_figure_through_a_linked_heatmap_that_is_a_hard_link_or_fifo(sweep_folder, tmp_path):
    """A hard link or a FIFO at a trial's ``run/x_heatmap.png``: named, exit 2, the outside file never copied."""
    sw, run = sweep_folder
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    os.link(secret, run / "x_heatmap.png")
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "x_heatmap.png", "hard link")
    (run / "x_heatmap.png").unlink()
    os.mkfifo(run / "x_heatmap.png")
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "x_heatmap.png", "FIFO")
    assert not any(b"SECRET" in p.read_bytes() for p in (sw / "report").rglob("*") if p.is_file())


def test_a_report_names_a_symbolic_link_at_a_trials_heatmap(sweep_folder, tmp_path):
    """``run/x_heatmap.png -> /elsewhere/secret.txt``: the hard link and FIFO are named (exit 2), the symbolic
    link was ``OSError: [Errno 40] Too many levels of symbolic links`` raised from ``read_own_file``
    through ``write_report`` (exit 1, a traceback)."""
    sw, run = sweep_folder
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    os.symlink(secret, run / "x_heatmap.png")
    r = runner.invoke(app, ["report", str(sw)])
    _clean_exit_2(r, "x_heatmap.png")


@pytest.mark.parametrize("link", ["run", "run/analysis", "run/samples/s1"])
def test_a_report_never_takes_files_through_a_linked_folder_of_a_trial(sweep_folder, tmp_path, link):
    """A symbolic link at a trial's ``run`` (another person's run), ``run/analysis`` or one samples folder:
    ``read_own_file`` opens each figure with ``O_NOFOLLOW``, which refuses a link only at the last name, and the
    contact sheet reads the linked samples folder, so ``elsewhere``'s heatmap, figure or images are copied
    into ``report/`` and shown on a page someone shares (exit 0). ``mosaic sweep`` removes such links
    (attack 15); the report must refuse them (named) or leave them out."""
    from tests.test_audit import scored_folder

    sw, run = sweep_folder
    other = tmp_path / "elsewhere"
    if link == "run/samples/s1":
        scored_folder(other)
    else:
        other.mkdir()
        (other / "private_heatmap.png").write_bytes(b"PRIVATE-NOT-THIS-RUNS")
        (other / "private.png").write_bytes(b"PRIVATE-NOT-THIS-RUNS")
    if link == "run":
        run.rmdir()
    (sw / "trials" / run.parent.name / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(other, sw / "trials" / run.parent.name / link)
    r = runner.invoke(app, ["report", str(sw)])
    assert "Traceback" not in r.output and r.exit_code in (0, 2), r.output
    copied = [p.name for p in (sw / "report").rglob("*") if p.is_file()
              and (b"PRIVATE-NOT-THIS-RUNS" in p.read_bytes() or p.name.endswith("-samples.png"))]
    assert not copied, copied


@pytest.mark.parametrize("where, body", [("x_heatmap.png", _png_header(60000, 60000)),
                                         ("analysis/probe.png", b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")],
                         ids=["bomb-heatmap", "svg-figure"])
def test_a_report_never_puts_an_image_it_did_not_check_on_its_page(sweep_folder, where, body):
    """The contact sheet reads only bounded raster images (header first, 1024 x 1024 px); a heatmap or an
    analysis figure is copied byte for byte and linked from ``index.html`` whatever it is: a PNG header of
    3.6 gigapixels (the browser of whoever opens the shared page decodes it) or an SVG named ``.png``. It
    must be refused by name or left out of the page."""
    sw, run = sweep_folder
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).write_bytes(body)
    r = runner.invoke(app, ["report", str(sw)])
    assert "Traceback" not in r.output
    if r.exit_code == 2:
        assert Path(where).name in " ".join(r.output.split())
    else:
        assert r.exit_code == 0, r.output
        assert not [p for p in (sw / "report").rglob("*") if p.is_file() and p.read_bytes() == body]


def test_a_report_of_hostile_names_parses_as_html_without_a_script(tmp_path):
    """A sweep name, description, axis value and failed trial's error holding markup: html5lib (strict)
    parses the page, no element but mosaic's own appears, the text is kept as text."""
    html5lib = pytest.importorskip("html5lib")
    import pandas as pd

    evil = "</title><!--<script>alert(1)</script>&amp;"
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "x" + evil, "description": evil, "kind": "diffusion", "config": "x.yaml",
                                                   "grid": {"label.model": [evil, "b"]}}))
    rows = [{"trial": f"t{i}{evil}", "status": s, "seed": 0, "label.model": m, "held_out.joint": 0.5, "seen.joint": 0.9,
             "error": evil if s == "failed" else ""} for i, (m, s) in enumerate([(evil, "done"), ("b", "failed")])]
    pd.DataFrame(rows).to_csv(sw / "results.csv", index=False)
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    page = (sw / "report" / "index.html").read_text()
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    assert doc.findall(".//script") == [] and "<!--" not in page.replace("&lt;!--", "")
    assert evil in "".join(doc.find(".//h1").itertext())


# ------------------------------------------------------------------------------------------------
# class 3: no code from files (YAML tags in folders mosaic reads)
# ------------------------------------------------------------------------------------------------

def test_a_python_tag_in_a_sweep_folders_sweep_yaml_runs_nothing(tmp_path):
    marker = tmp_path / "PWNED"
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.yaml").write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\nkind: diffusion\nconfig: x.yaml\n")
    (sw / "results.csv").write_text("trial,status,seed\nt0,done,0\n")
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "sweep.yaml")
    assert not marker.exists() and not (sw / "report" / "index.html").exists()


def test_a_python_tag_in_a_runs_config_yaml_runs_nothing_under_sample_or_analyze(drun, tmp_path):
    marker = tmp_path / "PWNED"
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    cfg = run / "config.yaml"
    cfg.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n" + cfg.read_text().split("\n", 1)[1])
    for cmd in (["sample", str(run), "--out", str(tmp_path / "s")], ["analyze", str(run)]):
        _clean_exit_2(runner.invoke(app, cmd), "config.yaml")
    assert not marker.exists() and not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------
# class 2 / 1: hard-linked copies of a dataset (cp -al)
# ------------------------------------------------------------------------------------------------

def test_a_repair_or_overwrite_of_a_hard_linked_copy_never_changes_the_original(made, tmp_path):
    """``cp -al ds copy``: the copy's card removed, then ``verify --repair``, a ``generate`` rerun and
    ``generate --overwrite`` of the copy: every file of the original keeps its bytes and verifies."""
    spec, src = made
    ds = tmp_path / "ds"
    shutil.copytree(src, ds)
    before = _tree(ds)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(ds), str(copy)], check=True)
    (copy / "README.md").unlink()
    assert runner.invoke(app, ["verify", str(copy), "--repair"]).exit_code == 0
    assert runner.invoke(app, ["generate", str(spec), "--out", str(copy)]).exit_code == 0
    assert runner.invoke(app, ["generate", str(spec), "--out", str(copy), "--overwrite"]).exit_code == 0
    assert _tree(ds) == before
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0


def test_training_on_a_hard_linked_copy_of_a_dataset_is_whole_or_writes_nothing(tmp_path):
    """``cp -al data copy`` (the copy verifies OK), ``dataset.path: copy``: ``RunFolder`` writes
    ``config.yaml``, ``dataset.json`` and ``run.json``, then ``atomic_copy(manifest.json)`` refuses the
    hard link ("not a file of mosaic's own", with the fix "make it readable"), exit 2, the run folder left
    half-made. The rerun "resumes" and finishes a run with no ``dataset_manifest.json``, so ``evaluate``
    of its samples no longer finds their spec. Either the run trains (the copy is a whole dataset) or it is
    refused before anything is written, and never finishes without its record of the dataset."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC, TINY_UNET

    generate(parse_spec(SPEC), tmp_path / "data")
    subprocess.run(["cp", "-al", str(tmp_path / "data"), str(tmp_path / "copy")], check=True)
    run = tmp_path / "run"
    cfg = {"name": "t", "out": str(run), "dataset": {"path": str(tmp_path / "copy")}, "model": TINY_UNET,
           "training": {"steps": 1, "batch_size": 4, "lr": 1e-3, "device": "cpu", "log_every": 1, "checkpoint_every": 1,
                        "val_every": 0, "threads": 1},
           "sampling": {"steps": 1, "n_per_combination": 1, "batch_size": 8},
           "evaluation": {"enabled": False, "select": "loss"}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    first = runner.invoke(app, ["train", "diffusion", str(tmp_path / "cfg.yaml")])
    assert "Traceback" not in first.output
    if first.exit_code == 2:
        assert not run.exists() or not any(run.iterdir()), sorted(os.listdir(run))
    else:
        assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["train", "diffusion", str(tmp_path / "cfg.yaml")])
    if again.exit_code == 0:
        assert (run / "dataset_manifest.json").is_file()


# ------------------------------------------------------------------------------------------------
# class 7: an interrupted export finishes on its rerun
# ------------------------------------------------------------------------------------------------

def test_an_interrupted_parquet_to_imagefolder_export_finishes_on_its_rerun(made, tmp_path, monkeypatch):
    import mosaic.export as E

    pq = tmp_path / "pq"
    assert runner.invoke(app, ["export", str(made[1]), "--out", str(pq), "--format", "parquet"]).exit_code == 0
    real = E.iter_records

    def stop_after_three(*a, **k):
        for i, row in enumerate(real(*a, **k)):
            if i == 3:
                raise KeyboardInterrupt
            yield row

    monkeypatch.setattr(E, "iter_records", stop_after_three)
    out = tmp_path / "back"
    r = runner.invoke(app, ["export", str(pq), "--out", str(out), "--format", "imagefolder"])
    assert r.exit_code != 0 and json.loads((out / "manifest.json").read_text())["status"] != "complete"
    monkeypatch.setattr(E, "iter_records", real)
    r = runner.invoke(app, ["export", str(pq), "--out", str(out), "--format", "imagefolder"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 0, r.output
    assert _tree(out / "train") == _tree(made[1] / "train")
