"""Hostile cases of a sixteenth attack on the data path (issue 23).

What broke, and the mechanism that closes it:

- **An I/O error while reading** (EIO, ESTALE: a failing disk, a stale network mount) where no reader
  names it was a Python traceback: the CLI group (:class:`mosaic.cli._MosaicGroup`) names every OSError
  of the file system or the device under it (:data:`mosaic.cli._IO_ERRNOS`) with the path and errno, exit 2.
- **``--workers 1024``** started a process per task in flight (generation, the parser's reads, a stream's
  DataLoader, a CPU sweep's trials): :func:`mosaic.executors.worker_processes` caps every pool at the
  usable CPUs, and the CLI says so.
- **``mosaic sample --out LINK``** replaced the person's link by a folder, exit 0:
  :func:`mosaic.lab.diffusion.scoring.refuse_linked_out` refuses it by name.
- **``MosaicDataset[True]``** gave item 1: :func:`mosaic.torch_data.item_index` refuses a bool, a float,
  a slice, a string, and names an index out of range (``StreamingDataset`` too).
- **``mosaic evaluate DS/test_ood`` without ``--spec``** was click's bare "Missing option": a split folder
  is read against its own dataset, any other folder names what to give.

Round 16's own cases (about 150 tried, see the report; these broke):

- ``generate --out LINK`` of a finished dataset and ``verify LINK --repair`` repaired through the link:
  :func:`mosaic.dataset.refuse_linked_root` (export --out LINK too).
- a manifest giving ``status`` twice passed ``verify``: :func:`mosaic.io.loads_json` refuses a key given twice.
- a dataset split scored against a ``--spec`` that draws otherwise (another object size): count MAE 1.67, exit 0:
  :data:`mosaic.evaluation.provenance.DRAWING`.
- ``metadata.jsonl`` of a folder to evaluate as a link to another folder's records: read, exit 0
  (:func:`mosaic.evaluation.folder._own_records`).
- a sweep axis over ``out`` (conditions differing by nothing); a sweep ``config: /etc/passwd`` named as a --set problem.
- ``MosaicDataset(load_masks="no")`` read as true; ``mosaic report /`` told to sweep into ``/``.
- ``preview --n 400`` of a 2048 px spec held every render (~14 GB): :func:`mosaic.preview.rendered_tiles`.
- ``sample`` while ``best/`` was replaced loaded half old, half new weights:
  :func:`mosaic.lab.checkpoint.read_weights_record` and one read per file.
"""

from __future__ import annotations

import errno
import json
import os
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _failing_open(monkeypatch, needle: str, code: int) -> None:
    """``os.open`` and ``open`` of any path holding ``needle`` fail with ``code`` (a disk or a mount failing)."""
    import builtins

    real_os_open, real_open = os.open, builtins.open

    def os_open(path, flags, *a, **k):
        if needle in str(path):
            raise OSError(code, os.strerror(code), str(path))
        return real_os_open(path, flags, *a, **k)

    def b_open(file, *a, **k):
        if isinstance(file, (str, os.PathLike)) and needle in str(file):
            raise OSError(code, os.strerror(code), str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)


# ------------------------------------------------------------------------------------------------
# round 15's leftovers
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code, name", [(errno.EIO, "EIO"), (errno.ESTALE, "ESTALE")])
def test_an_io_error_while_reading_a_folder_to_evaluate_is_named_with_path_and_errno(made, tmp_path, monkeypatch, code, name):
    """(1a) EIO / ESTALE on a read no reader names (a folder to evaluate's metadata.jsonl): the path and errno, exit 2."""
    spec, ds = made
    folder = tmp_path / "imgs"
    (folder / "images").mkdir(parents=True)
    (folder / "metadata.jsonl").write_text('{"file_name": "images/a.png", "concepts": {"color": "red", "count": 1}}\n')
    _failing_open(monkeypatch, "imgs/metadata.jsonl", code)
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(spec), "--check-n", "0"])
    _clean_exit_2(r, "metadata.jsonl", name, f"errno {code}")


def test_an_io_error_reaching_the_cli_group_is_named_not_raised(monkeypatch):
    """(1a) Any command: an OSError of the file system (EIO, EACCES, EMFILE) is named; another errno still raises."""
    import typer

    from mosaic.cli import _MosaicGroup, io_failure

    for code in (errno.EIO, errno.ESTALE, errno.EACCES, errno.EMFILE):
        assert f"errno {code}" in io_failure(OSError(code, os.strerror(code), "/x"))
    monkeypatch.setattr(typer.core.TyperGroup, "invoke", lambda self, ctx: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error", "/d/f")))
    r = runner.invoke(app, ["validate", "x.yaml"])
    _clean_exit_2(r, "/d/f", "EIO")
    monkeypatch.setattr(typer.core.TyperGroup, "invoke", lambda self, ctx: (_ for _ in ()).throw(OSError(errno.EEXIST, "File exists", "/d/f")))
    r = runner.invoke(app, ["validate", "x.yaml"])
    assert isinstance(r.exception, OSError) and r.exception.errno == errno.EEXIST  # a mosaic bug is not hidden
    assert _MosaicGroup


def test_workers_are_capped_at_the_usable_cpus_with_a_note(made, tmp_path, monkeypatch):
    """(1b) --workers 1024: at most the usable CPUs' processes in every pool, and the CLI says so; same bytes."""
    import mosaic.executors as ex

    monkeypatch.setattr(ex, "usable_cpus", lambda: 2)
    assert ex.worker_processes(1024) == 2 and ex.worker_processes(1024, tasks=1) == 1 and ex.worker_processes(1) == 1
    e = ex.LocalExecutor(1024)
    try:
        assert e.pool is not None and e.pool._max_workers == 2 and e.window == 4
    finally:
        e.close()
    assert ex.workers_note(2) is None and "using 2 processes" in ex.workers_note(1024)
    spec, ds = made
    r = runner.invoke(app, ["generate", str(spec), "--out", str(tmp_path / "w"), "--workers", "1024"])
    assert r.exit_code == 0, r.output
    assert "--workers 1024: using 2 processes" in " ".join(r.output.split())
    assert (tmp_path / "w" / "checksums.sha256").read_bytes() == (ds / "checksums.sha256").read_bytes()


def test_a_streams_dataloader_and_a_cpu_sweep_never_start_more_processes_than_cpus(made, monkeypatch):
    """(1b) The lab's streamed data (dataset.workers up to 1024) and a CPU sweep's trial slots are capped too."""
    import mosaic.executors as ex
    import mosaic.trials as tr
    from mosaic.stream import StreamSource

    spec, _ = made
    monkeypatch.setattr(ex, "usable_cpus", lambda: 2)
    assert StreamSource(str(spec), "train", encode=lambda recs: {}, workers=1024).workers == 2
    assert StreamSource(str(spec), "train", encode=lambda recs: {}, workers=0).workers == 0
    seen = []
    monkeypatch.setattr(tr, "_gpu_count", lambda: 0)
    monkeypatch.setattr(tr, "cpu_slots", lambda w, t: min(w, 2))
    monkeypatch.setattr(tr, "run_trial", lambda kind, d, env, timeout: seen.append(env) or {"status": "done", "dir": d})
    tr.run_local("diffusion", [{"dir": f"t{i}"} for i in range(5)], 1024, None)
    assert len(seen) == 5 and {e["OMP_NUM_THREADS"] for e in seen} == {str(max(1, (os.cpu_count() or 1) // 2))}


def test_sample_out_given_as_a_link_is_refused_and_the_link_kept(drun, tmp_path):
    """(1c) sample --out LINK (to an empty folder, or to an earlier samples folder): named, exit 2, the link and its target as they were."""
    run, _ = drun
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(target)
    r = runner.invoke(app, ["sample", str(run), "--out", str(link), "-k", "1", "--steps", "2", "--device", "cpu", "--no-score"])
    _clean_exit_2(r, "--out", "symbolic link", str(target))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    assert not any(p.name.endswith(".lock") for p in tmp_path.iterdir())  # refused before a lock file was made


def test_sample_and_score_itself_refuses_a_linked_out(tmp_path):
    """(1c) The Python API: the same refusal (mosaic.lab.diffusion.scoring.refuse_linked_out)."""
    from mosaic.errors import DatasetError
    from mosaic.lab.diffusion.scoring import refuse_linked_out

    (tmp_path / "t").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "t")
    with pytest.raises(DatasetError, match="symbolic link"):
        refuse_linked_out(tmp_path / "l")
    refuse_linked_out(tmp_path / "t")
    refuse_linked_out(None)


@pytest.mark.parametrize("index, err, said", [
    (True, TypeError, "boolean"), (np.bool_(False), TypeError, "boolean"), (torch.tensor(True), TypeError, "boolean"),
    (1.0, TypeError, "float"), (slice(0, 2), TypeError, "slice"), ("3", TypeError, "str"), (8, IndexError, "8 item"),
    (-9, IndexError, "outside"),
])
def test_a_bool_float_slice_or_out_of_range_index_is_refused(made, index, err, said):
    """(1d) MosaicDataset[True] gave item 1 without a word; a float, a slice, a string, 8 of 8: named."""
    from mosaic.torch_data import MosaicDataset

    _, ds = made
    d = MosaicDataset(ds, "train")
    with pytest.raises(err, match=said):
        d[index]
    assert d[-1]["index"] == 7 and d[np.int64(2)]["index"] == 2 and d[torch.tensor(3)]["index"] == 3


@pytest.mark.parametrize("index, err", [(True, TypeError), (1.5, TypeError), (-1, IndexError), (8, IndexError), (10**6, IndexError)])
def test_a_streaming_index_outside_the_split_or_not_an_integer_is_refused(made, index, err):
    """(1d) StreamingDataset[True] and an index past the split: named (an index past the split would render a sample of no dataset)."""
    from mosaic.stream import StreamingDataset

    spec, _ = made
    s = StreamingDataset(str(spec), "train")
    with pytest.raises(err, match="split 'train'"):
        s[index]
    assert s[np.int64(7)]["index"] == 7


def test_evaluate_of_a_split_folder_without_spec_reads_it_against_its_dataset(made, tmp_path):
    """(1e) evaluate DS/test_ood without --spec: read against DS (checked first); any other folder names the fix."""
    spec, ds = made
    r = runner.invoke(app, ["evaluate", str(ds / "test_ood"), "--check-n", "0"])
    assert r.exit_code == 0, r.output
    assert "3 images of" in r.output
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ds)]), "is a mosaic dataset", "test_ood")
    other = tmp_path / "imgs"
    other.mkdir()
    _clean_exit_2(runner.invoke(app, ["evaluate", str(other)]), "--spec", "missing", "SPEC.yaml")
    (other / "sampling.json").write_text("{}")
    _clean_exit_2(runner.invoke(app, ["evaluate", str(other)]), "samples folder", "dataset.json")


# ------------------------------------------------------------------------------------------------
# round 16's own cases
# ------------------------------------------------------------------------------------------------

def test_a_dataset_named_through_a_link_is_never_written_through_it(made, tmp_path):
    """(D7) generate --out LINK of a finished dataset and verify LINK --repair repaired through the link (exit 0),
    export --out LINK said "not empty": each is refused naming the real folder; reading through the link still works."""
    import shutil

    spec, ds = made
    real = tmp_path / "real"
    shutil.copytree(ds, real)
    link = tmp_path / "link"
    link.symlink_to(real)
    (real / "val" / "images" / "000001.png").unlink()
    before = sorted(p.name for p in (real / "val" / "images").iterdir())
    _clean_exit_2(runner.invoke(app, ["generate", str(spec), "--out", str(link)]), "--out", "symbolic link", str(real))
    _clean_exit_2(runner.invoke(app, ["generate", str(spec), "--out", str(link), "--format", "parquet"]), "symbolic link")
    _clean_exit_2(runner.invoke(app, ["verify", str(link), "--repair"]), "symbolic link", str(real))
    assert sorted(p.name for p in (real / "val" / "images").iterdir()) == before  # nothing written through the link
    assert runner.invoke(app, ["verify", str(link)]).exit_code == 1  # read through it: damage named
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "elink").symlink_to(empty)
    _clean_exit_2(runner.invoke(app, ["export", str(ds), "--out", str(tmp_path / "elink"), "--format", "parquet"]), "symbolic link")
    assert not any(empty.iterdir())


def test_a_json_file_giving_a_key_twice_is_refused_by_every_folder_reader(made, tmp_path):
    """(D1) A manifest giving "status" twice (incomplete, then complete) passed verify: json.loads keeps the last
    value, another reader the first. mosaic.io.loads_json, the parser of every JSON file read from a folder, refuses it."""
    import shutil

    from mosaic.io import JSONReadError, loads_json

    spec, ds = made
    d = tmp_path / "d"
    shutil.copytree(ds, d)
    text = (d / "manifest.json").read_text()
    assert '"status": "complete"' in text
    (d / "manifest.json").write_text(text.replace('"status": "complete"', '"status": "incomplete", "status": "complete"'))
    _clean_exit_2(runner.invoke(app, ["verify", str(d)]), "manifest.json", "given twice", "status")
    with pytest.raises(JSONReadError, match="given twice"):
        loads_json('{"a": {"b": 1, "b": 2}}')
    assert loads_json('{"a": {"b": 1}, "c": [{"b": 2}, {"b": 3}]}') == {"a": {"b": 1}, "c": [{"b": 2}, {"b": 3}]}


@pytest.mark.parametrize("sets, differs", [(["objects.0.size=0.4"], "objects"), (["colors.red=[0, 0, 255]"], "colors"),
                                           (["image.background=white"], "image")])
def test_a_dataset_split_scored_against_a_spec_that_draws_otherwise_is_refused(made, sets, differs):
    """(O9) evaluate DS/test_ood --spec SPEC with another object size (same concepts): count MAE 1.67, exit 0, the
    dataset's own images scored against a drawing they do not show. mosaic.evaluation.provenance.check_spec_reads
    compares every section that decides what an image shows; the name, seed, splits and holdout may differ."""
    spec, ds = made
    args = ["evaluate", str(ds / "test_ood"), "--spec", str(spec), "--check-n", "0"]
    _clean_exit_2(runner.invoke(app, args + sum([["--set", s] for s in sets], [])), "draws them otherwise", differs)
    r = runner.invoke(app, args + ["--set", "seed=7", "--set", "name=other"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("axis", ["grid:\n  out: [/tmp/a, /tmp/b]\n", "set:\n  out: /tmp/a\ngrid:\n  training.lr: [0.001]\n"])
def test_a_sweep_axis_over_the_run_folder_is_refused(tmp_path, axis):
    """(S6) grid `out: [a, b]` planned two "conditions" that the sweep gave one config (it sets each trial's out to
    trials/<id>/run): results compared conditions that differ by nothing. mosaic.sweep.SweepSpec refuses it."""
    p = tmp_path / "s.yaml"
    p.write_text("name: ax\nkind: transformer\nconfig: experiments/train/binding_tokens.yaml\n" + axis + "seeds: [0]\n")
    _clean_exit_2(runner.invoke(app, ["sweep", str(p), "--dry-run", "--out", str(tmp_path / "sw")]), "sets out", "trials/<id>/run")


@pytest.mark.parametrize("content", [None, "- a list\n"])
def test_a_sweep_whose_config_is_no_mapping_names_the_file(tmp_path, content):
    """(S5) config: /etc/passwd (a YAML string) said "--set: 'training.lr': '' is a value, not a section"."""
    cfg = Path("/etc/passwd") if content is None else tmp_path / "c.yaml"
    if content is not None:
        cfg.write_text(content)
    if not cfg.is_file():
        pytest.skip("no /etc/passwd here")
    p = tmp_path / "s.yaml"
    p.write_text(f"name: cf\nkind: transformer\nconfig: {cfg}\ngrid:\n  training.lr: [0.001]\nseeds: [0]\n")
    _clean_exit_2(runner.invoke(app, ["sweep", str(p), "--dry-run", "--out", str(tmp_path / "sw")]), str(cfg), "not a training config")


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_a_folder_to_evaluate_reads_only_its_own_records(made, tmp_path, kind):
    """(J13) metadata.jsonl as a link to another folder's records (another K, another seed) was read: this folder's
    images scored against another folder's intended values, exit 0. mosaic.evaluation.folder._own_records refuses a
    symbolic or hard link there, as the images are refused."""
    import shutil

    spec, ds = made
    other = tmp_path / "other"
    (other / "images").mkdir(parents=True)
    shutil.copy(ds / "test_ood" / "images" / "000000.png", other / "images" / "a.png")
    (other / "records.jsonl").write_text('{"file_name": "images/a.png", "concepts": {"color": "red", "count": 2}}\n')
    meta = other / "metadata.jsonl"
    (meta.symlink_to if kind == "symbolic" else meta.hardlink_to)(other / "records.jsonl")
    _clean_exit_2(runner.invoke(app, ["evaluate", str(other), "--spec", str(spec), "--check-n", "0"]), f"is a {kind} link")
    meta.unlink()
    shutil.copy(other / "records.jsonl", meta)
    r = runner.invoke(app, ["evaluate", str(other), "--spec", str(spec), "--check-n", "0"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("kw", [{"load_masks": "no"}, {"verify": "False"}, {"verify": 0}])
def test_a_dataset_flag_that_is_no_boolean_is_refused(made, kw):
    """(H5/H6) MosaicDataset(..., load_masks="no") read "no" as true (then "the dataset has no masks"), verify="False" as
    true: a flag must be True or False, as StreamingDataset's are."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    _, ds = made
    with pytest.raises(DatasetError, match="must be True or False"):
        MosaicDataset(ds, "train", **kw)
    assert len(MosaicDataset(ds, "train", verify=np.bool_(True))) == 8


def test_report_of_a_folder_of_other_files_is_never_told_to_sweep_into_it(tmp_path):
    """(E8b) `mosaic report /` said "run `mosaic sweep SWEEP.yaml --out /` first"; an empty folder or an interrupted
    sweep (its sweep.yaml, no results.csv yet) still gets that fix."""
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    _clean_exit_2(runner.invoke(app, ["report", str(other)]), "not a sweep folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    _clean_exit_2(runner.invoke(app, ["report", str(empty)]), "has no results.csv", "--out")


def test_preview_holds_tiles_never_every_whole_render(made, tmp_path, monkeypatch):
    """(E16) preview --n 400 of a 2048 px spec rendered all 400 at once (34 MB each: about 14 GB) to draw 160 px
    tiles; mosaic.preview.rendered_tiles renders 8 at a time and keeps the tiles. The sheet is byte-identical."""
    from mosaic.dataset import sample_record
    from mosaic.preview import contact_sheet, rendered_tiles
    from mosaic.spec import load_spec
    from renderers import backend_of, get_renderer

    spec, _ = made
    s = load_spec(spec)
    recs, scenes = zip(*[sample_record(s, "train", i) for i in range(8)])
    renderer = get_renderer(backend_of(s), supersample=s.image.supersample)
    whole, _ = renderer.render(list(scenes))
    contact_sheet(whole, [r["caption"] for r in recs], tmp_path / "a.png")
    batches = []
    real = renderer.render
    monkeypatch.setattr(renderer, "render", lambda sc: batches.append(len(sc)) or real(sc))
    tiles = rendered_tiles(renderer, list(scenes) * 3)
    assert max(batches) <= 8 and sum(batches) == 24 and tiles.shape == (24, 160, 160, 3)
    contact_sheet(tiles[:8], [r["caption"] for r in recs], tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_weights_replaced_between_two_files_are_never_loaded_half_old_half_new(drun, tmp_path, monkeypatch):
    """(R10) `mosaic sample` while a resumed training replaces best/: the backbone was loaded from the old best and the
    conditioner from the new one, each passing its own (re-read) weights.json, exit 0. The record is read once per
    folder and each file's bytes are digested and loaded from one read (mosaic.lab.checkpoint.check_weights_file)."""
    import shutil

    import mosaic.lab.diffusion.task as task_mod
    from mosaic.lab.checkpoint import write_weights_record
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    run_id = json.loads((run / "run.json").read_text())["id"]
    new = tmp_path / "newbest"
    shutil.copytree(run / "best", new)
    (new / "weights.json").unlink()
    state = load_file(str(new / "conditioner.safetensors"))
    save_file({k: v + 1 for k, v in state.items()}, str(new / "conditioner.safetensors"))
    write_weights_record(new, run_id)  # a newer export of the same run
    real, calls = task_mod.load_weights_file, []

    def swapping(module, path, weights_dir, *rest):
        calls.append(path.name)
        if len(calls) == 2:  # the training replaces best/ between the backbone and the conditioner
            os.rename(run / "best", tmp_path / "oldbest")
            os.rename(new, run / "best")
        return real(module, path, weights_dir, *rest)

    monkeypatch.setattr(task_mod, "load_weights_file", swapping)
    r = runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "s"), "--steps", "1", "-k", "1", "--device", "cpu", "--no-score"])
    _clean_exit_2(r, "conditioner.safetensors", "replaced")
    assert not (tmp_path / "s").exists()


# -- left by the round's helper for mosaic/records.py (fixed after it) ------------------------------------


def _forge_spec(ds: Path, edit) -> None:
    """Edit the spec a manifest stores and recompute its fingerprint, as a forger who knows the format would."""
    from mosaic.verify import spec_fingerprint

    m = json.loads((ds / "manifest.json").read_text())
    edit(m["spec"])
    m["fingerprint"] = spec_fingerprint(m["spec"])
    (ds / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("edit,field", [
    (lambda s: s["objects"][0].update(size=0.4), "scene.objects.0.size"),
    (lambda s: s["objects"][0].update(shape="square"), "scene.objects.0.shape"),
    (lambda s: s["objects"][0].update(name="cube"), "scene.objects.0.template"),
], ids=["size", "shape", "template"])
def test_a_manifest_whose_spec_draws_other_objects_never_passes_verify(made, tmp_path, edit, field):
    """A manifest's spec edited (the object's size, shape or name) and its fingerprint recomputed: the
    quick check flagged the card only, `verify --repair` rewrote the card and `verify` then said OK,
    though no record shows what the spec draws. Every record's objects are checked against the spec's
    rules (mosaic.record_objects.object_rules), so the records are named, before and after a repair."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(made[1], ds)
    _forge_spec(ds, edit)
    runner.invoke(app, ["verify", str(ds), "--repair"])
    res = runner.invoke(app, ["verify", str(ds)])
    assert res.exit_code != 0, res.output
    assert field in " ".join(res.output.split())


def test_object_rules_accept_what_each_rule_kind_draws_and_nothing_else():
    from mosaic.record_objects import object_rules
    from mosaic.scene import Scene, SceneObject
    from mosaic.spec import parse_spec

    spec = parse_spec({
        "name": "r", "image": {"size": 32},
        "concepts": {"color": {"values": ["red", "blue"]}, "size": {"values": ["small", "large"]}},
        "objects": [{"name": "a", "shape": {"choice": ["circle", "square"]}, "color": {"concept": "color"}, "size": {"concept": "size"}}],
        "distractors": [{"name": "d", "shape": "triangle", "color": "gray", "size": {"range": [0.1, 0.2]}}],
        "splits": {"train": 4, "val": 0, "test": 4}})
    check = object_rules(spec)

    def scene(*objs):
        return Scene(32, (0, 0, 0), [SceneObject(sh, c, spec.palette[c], sz, (0.5, 0.5), 0.0, t) for t, sh, c, sz in objs])

    assert check(scene(("a", "square", "red", 0.24), ("d", "triangle", "gray", 0.15))) is None
    assert check(scene(("a", "circle", "blue", 0.12), ("d", "triangle", "gray", 0.2))) is None
    assert "scene.objects.0.size" in check(scene(("a", "circle", "red", 0.16)))
    assert "scene.objects.1.size" in check(scene(("a", "circle", "red", 0.12), ("d", "triangle", "gray", 0.25)))
    assert "scene.objects.0.shape" in check(scene(("a", "star", "red", 0.12)))
    assert "scene.objects.1.shape" in check(scene(("a", "circle", "red", 0.12), ("d", "square", "gray", 0.15)))
    assert "scene.objects.0.template" in check(scene(("b", "circle", "red", 0.12)))
    bad = scene(("a", "circle", "red", 0.12))
    bad.objects[0].rgb = (1, 2, 3)
    assert "scene.objects.0.rgb" in check(bad)


def test_verify_of_a_folder_of_other_files_is_never_told_to_generate_into_it(tmp_path):
    """`mosaic verify /` (any folder that is no dataset) said "make one with `mosaic generate SPEC --out /`"."""
    (tmp_path / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["verify", str(tmp_path)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "holds no manifest.json but other files" in out and f"--out {tmp_path}`" not in out
    empty = tmp_path / "empty"
    empty.mkdir()
    out = " ".join(runner.invoke(app, ["verify", str(empty)]).output.split())
    assert "manifest.json is missing" in out


def test_a_folder_to_evaluate_whose_images_would_not_fit_in_memory_is_refused_before_decoding(made, monkeypatch):
    """`evaluate` holds every image of a folder (each bounded before decode, the folder not): a folder of
    more images than FOLDER_IMAGE_BYTES holds is refused before any image is decoded, naming the part size."""
    import mosaic.evaluation.folder as F

    spec, ds = made
    monkeypatch.setattr(F, "FOLDER_IMAGE_BYTES", 16 * 16 * 3 * 2)  # two 16 px images
    decoded = []
    monkeypatch.setattr(F, "decode_image", lambda *a, **k: decoded.append(1))
    res = runner.invoke(app, ["evaluate", str(ds / "test_ood"), "--spec", str(spec)])
    _clean_exit_2(res, "would hold more than", "parts of at most 2 images")
    assert not decoded
