"""Hostile cases of a twenty-third attack on the read paths and the claims files make (round 23, part A).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack23a: ...")``.

Classes: (a) wrong data without a word, (b) a file's claim believed, (c) a traceback instead of a named
error and exit status 2, (d) data lost or success reported on a half-written result.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import sweep_copy as _sweep_copy, QUICK_SAMPLE, clean_exit_2, copy_dataset, edit_manifest

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _no_traceback(r) -> None:
    assert not (r.exception is not None and not isinstance(r.exception, SystemExit)), repr(r.exception)
    assert "Traceback" not in r.output, r.output


def _edit_json(p: Path, edit) -> None:
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d, indent=2))


# ------------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def made_pq(made, tmp_path_factory):
    """The ``made`` dataset exported to Parquet."""
    pq = tmp_path_factory.mktemp("a23pq") / "pq"
    r = runner.invoke(app, ["export", str(made[1]), "-f", "parquet", "-o", str(pq)])
    assert r.exit_code == 0, r.output
    return pq


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """A tiny learned evaluator of the ``made`` dataset's spec (2 steps)."""
    import yaml

    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec
    from tests.conftest import TINY_COUNT_SPEC

    ev = tmp_path_factory.mktemp("a23ev") / "ev"
    train_evaluator(parse_spec(yaml.safe_load(TINY_COUNT_SPEC)), ev,
                    LearnedConfig(steps=2, batch_size=4, n_train=8, check_n=8, input_size=16, width=4, threads=1))
    return ev


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A scored samples folder (12 images) inside a run folder, with its audit page made."""
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("a23audit") / "run"
    scored_folder(root / "samples" / "test_ood_best")
    r = runner.invoke(app, ["audit", str(root)])
    assert r.exit_code == 0, r.output
    return root


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-trial sweep (2 training steps each)."""
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a23sw")


def _run_copy(drun, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


# ------------------------------------------------------------------------------------------------
# 1. a learned evaluator folder (`--evaluator DIR`) damaged or edited: named, exit 2, never a traceback
# ------------------------------------------------------------------------------------------------

def _cfg(edit):
    def apply(ev: Path) -> None:
        _edit_json(ev / "config.json", edit)
    return apply


def _replace_by_folder(name):
    def apply(ev: Path) -> None:
        (ev / name).unlink()
        (ev / name).mkdir()
        (ev / name / "x").write_text("x")
    return apply


_EVALUATOR_DAMAGE = {
    "config-not-utf8": (lambda ev: (ev / "config.json").write_bytes(b"\xff\xfe{}"), "config.json"),
    "config-a-list": (lambda ev: (ev / "config.json").write_text("[]"), "config.json"),
    "config-nested-deep": (lambda ev: (ev / "config.json").write_text("[" * 100000 + "]" * 100000), "config.json"),
    "config-width-nan": (_cfg(lambda c: c["config"].__setitem__("width", float("nan"))), "config.json"),
    "config-input-size-huge": (_cfg(lambda c: c["config"].__setitem__("input_size", 10 ** 9)), "config.json"),
    "config-classes-reordered": (_cfg(lambda c: c["concepts"].__setitem__("color", ["blue", "green", "red"])), "trained for spec"),
    "config-count-classes-strings": (_cfg(lambda c: c["concepts"].__setitem__("count", ["1", "2", "3"])), "trained for spec"),
    "config-concepts-a-list": (_cfg(lambda c: c.__setitem__("concepts", [1, 2])), "config.json"),
    "config-format-other": (_cfg(lambda c: c.__setitem__("format", "mosaic-evaluator/9")), "config.json"),
    "weights-empty": (lambda ev: (ev / "model.safetensors").write_bytes(b""), "model.safetensors"),
    "weights-truncated": (lambda ev: (ev / "model.safetensors").write_bytes((ev / "model.safetensors").read_bytes()[:100]),
                          "model.safetensors"),
    "weights-a-folder": (_replace_by_folder("model.safetensors"), "model.safetensors"),
    "config-a-folder": (_replace_by_folder("config.json"), "config.json"),
    "report-not-utf8": (lambda ev: (ev / "report.json").write_bytes(b"\xff"), "report.json"),
    "report-nested-deep": (lambda ev: (ev / "report.json").write_text("{\"a\":" * 50000 + "1" + "}" * 50000), "report.json"),
}


@pytest.mark.parametrize("case", sorted(_EVALUATOR_DAMAGE))
def test_evaluate_names_a_damaged_learned_evaluator_folder(made, learned, tmp_path, case):
    damage, said = _EVALUATOR_DAMAGE[case]
    ev = tmp_path / "ev"
    shutil.copytree(learned, ev)
    damage(ev)
    r = runner.invoke(app, ["evaluate", str(made[1] / "test_ood"), "-e", str(ev), "--check-n", "4", "-o", str(tmp_path / "out")])
    _clean_exit_2(r, said)
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_evaluate_with_an_undamaged_copy_of_a_learned_evaluator_scores(made, learned, tmp_path):
    """No false alarm: a plain copy of the evaluator folder is read."""
    ev = tmp_path / "ev"
    shutil.copytree(learned, ev)
    r = runner.invoke(app, ["evaluate", str(made[1] / "test_ood"), "-e", str(ev), "--check-n", "4"])
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# 2. `mosaic audit --import` of a hostile audit.json: named, exit 2, nothing stored
# ------------------------------------------------------------------------------------------------

def _good_marks(items: dict) -> dict:
    return {"audit_id": items["meta"]["audit_id"],
            "marks": [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "mark": "correct"} for it in items["items"]]}


_AUDIT_EDITS = {
    "marks-a-mapping": (lambda d: d.__setitem__("marks", {}), "marks"),
    "marks-null": (lambda d: d.__setitem__("marks", None), "marks"),
    "a-mark-a-list": (lambda d: d["marks"].__setitem__(0, [1]), "marks[0]"),
    "id-a-float": (lambda d: d["marks"][0].__setitem__("id", 0.0), "marks[0].id"),
    "id-true": (lambda d: d["marks"][1].__setitem__("id", True), "marks[1].id"),
    "id-a-string": (lambda d: d["marks"][0].__setitem__("id", "0"), "marks[0].id"),
    "mark-unknown-word": (lambda d: d["marks"][0].__setitem__("mark", "banana"), "marks[0].mark"),
    "mark-a-list": (lambda d: d["marks"][0].__setitem__("mark", ["correct"]), "marks[0].mark"),
    "audit-id-a-number": (lambda d: d.__setitem__("audit_id", 5), "belongs to audit"),
    "audit-id-missing": (lambda d: d.pop("audit_id"), "audit_id"),
    "file-name-a-number": (lambda d: d["marks"][0].__setitem__("file_name", 3), "marks[0]"),
}


@pytest.mark.parametrize("case", sorted(_AUDIT_EDITS))
def test_an_audit_import_of_a_hostile_marks_file_is_named_and_stores_nothing(audited, tmp_path, case):
    edit, said = _AUDIT_EDITS[case]
    run = tmp_path / "run"
    shutil.copytree(audited, run)
    d = _good_marks(json.loads((run / "audit" / "items.json").read_text()))
    edit(d)
    saved = tmp_path / "audit.json"
    saved.write_text(json.dumps(d))
    r = runner.invoke(app, ["audit", str(run), "--import", str(saved)])
    _clean_exit_2(r, said)
    assert not (run / "audit" / "audit.json").exists()


@pytest.mark.parametrize("text", [b"", b"\xff\xfe", b"[" * 100000 + b"]" * 100000, b'{"audit_id": "x", "marks": [], "marks": []}'],
                         ids=["empty", "not-utf8", "nested-deep", "key-twice"])
def test_an_audit_import_of_an_unreadable_file_is_named(audited, tmp_path, text):
    run = tmp_path / "run"
    shutil.copytree(audited, run)
    saved = tmp_path / "audit.json"
    saved.write_bytes(text)
    _clean_exit_2(runner.invoke(app, ["audit", str(run), "--import", str(saved)]), "audit.json")
    assert not (run / "audit" / "audit.json").exists()


# ------------------------------------------------------------------------------------------------
# 3. Parquet manifests edited: each reader refuses, naming it
# ------------------------------------------------------------------------------------------------

def _readers_refuse(ds: Path, said: str) -> None:
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code in (1, 2), r.output
    _no_traceback(r)
    assert said in " ".join(r.output.split()), r.output
    with pytest.raises(DatasetError):
        MosaicDataset(ds, "train")


_PQ_EDITS = {
    "shard-rows-a-float": (lambda m: m["shards"]["train"][0].__setitem__("rows", 8.0), "manifest.json"),
    "shard-bytes-a-string": (lambda m: m["shards"]["train"][0].__setitem__("bytes", str(m["shards"]["train"][0]["bytes"])),
                             "manifest.json"),
    "shard-name-a-number": (lambda m: m["shards"]["train"][0].__setitem__("name", 5), "manifest.json"),
    "shard-listed-twice": (lambda m: m["shards"]["train"].append(dict(m["shards"]["train"][0])), "manifest.json"),
    "shards-a-list": (lambda m: m.__setitem__("shards", []), "manifest.json"),
    "storage-imagefolder": (lambda m: m.__setitem__("storage", "imagefolder"), "manifest.json"),
}


@pytest.mark.parametrize("case", sorted(_PQ_EDITS))
def test_a_parquet_manifest_edited_is_refused_by_every_reader(made_pq, tmp_path, case):
    edit, said = _PQ_EDITS[case]
    ds = tmp_path / "pq"
    shutil.copytree(made_pq, ds)
    edit_manifest(ds, edit)
    _readers_refuse(ds, said)


def test_an_imagefolder_manifest_claiming_parquet_storage_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, lambda m: m.__setitem__("storage", "parquet"))
    _readers_refuse(ds, "manifest.json")


@pytest.mark.parametrize("what", ["checksums.sha256", "train"])
def test_a_parquet_dataset_holding_an_imagefolders_files_is_refused(made, made_pq, tmp_path, what):
    """An imagefolder's ``checksums.sha256`` or split folder copied into a Parquet dataset: stray, never read."""
    ds = tmp_path / "pq"
    shutil.copytree(made_pq, ds)
    src = made[1] / what
    (shutil.copytree if src.is_dir() else shutil.copy)(src, ds / what)
    _readers_refuse(ds, what)


def test_a_parquet_datasets_data_folder_as_a_link_is_refused(made_pq, tmp_path):
    ds = tmp_path / "pq"
    shutil.copytree(made_pq, ds)
    shutil.move(str(ds / "data"), str(tmp_path / "elsewhere"))
    (ds / "data").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    _readers_refuse(ds, "data")


# ------------------------------------------------------------------------------------------------
# 4. the manifest's stored leak check: a claim that verify never derives again
# ------------------------------------------------------------------------------------------------


def _held_out_cell_in_train(m):
    lc = m["leak_check"]
    cell = "|".join(str(v) for v in lc["held_out"][0])
    lc["counts"]["train"][cell] = 1  # the claim: a held-out combination was trained on


def _other_held_out_cells(m):
    lc = m["leak_check"]
    lc["held_out"], lc["seen"] = lc["seen"][:len(lc["held_out"])], lc["held_out"] + lc["seen"][len(lc["held_out"]):]


@pytest.mark.parametrize("edit", [_held_out_cell_in_train, _other_held_out_cells], ids=["held-out-cell-counted-in-train",
                                                                                     "held-out-cells-swapped-with-seen"])
def test_verify_finds_a_leak_check_that_is_not_the_tally_of_the_records(made, tmp_path, edit):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, edit)
    r = runner.invoke(app, ["verify", str(ds)])
    _no_traceback(r)
    assert r.exit_code in (1, 2), r.output
    assert "leak_check" in r.output or "leak check" in r.output, r.output


def test_a_manifest_leak_check_edited_in_shape_is_refused(made, tmp_path):
    """Held: a leak check of another shape (``held_out`` a number) is refused, exit 2 (round 17's check)."""
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, lambda m: m["leak_check"].__setitem__("held_out", 5))
    _clean_exit_2(runner.invoke(app, ["verify", str(ds)]), "leak_check")


# ------------------------------------------------------------------------------------------------
# 5. a run's dataset.json redirected to another dataset of the same concepts (another holdout)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_holdout(tmp_path_factory):
    """A dataset of the ``drun`` spec with another held-out combination (red circle, which the run trained on)."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC as D_SPEC

    s = copy.deepcopy(D_SPEC)
    s["holdout"]["rule"]["combinations"] = [["red", "circle"]]
    root = tmp_path_factory.mktemp("a23other") / "data"
    generate(parse_spec(s), root)
    return root


def _redirect(run: Path, other: Path) -> None:
    from mosaic.lab.data import manifest_fingerprint

    (run / "dataset.json").write_text(json.dumps(manifest_fingerprint(other), indent=2) + "\n")


def test_sample_refuses_a_dataset_json_naming_another_dataset(drun, other_holdout, tmp_path):
    run = _run_copy(drun, tmp_path)
    _redirect(run, other_holdout)
    out = tmp_path / "s"
    r = runner.invoke(app, ["sample", str(run), *QUICK_SAMPLE, "--out", str(out)])
    _clean_exit_2(r, "dataset.json")
    assert not (out / "metadata.jsonl").exists()


def test_analyze_refuses_a_dataset_json_naming_another_dataset(drun, other_holdout, tmp_path):
    run = _run_copy(drun, tmp_path)
    _redirect(run, other_holdout)
    r = runner.invoke(app, ["analyze", str(run), "--what", "probes", "--device", "cpu", "--no-write"])
    _clean_exit_2(r, "dataset.json")


def test_sample_of_a_copied_run_with_its_own_dataset_json_works(drun, tmp_path):
    """No false alarm: a byte copy of the run folder samples its own dataset."""
    run = _run_copy(drun, tmp_path)
    r = runner.invoke(app, ["sample", str(run), *QUICK_SAMPLE, "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "s" / "metadata.jsonl").read_text().splitlines()[0])
    assert rec["combination"] == ["blue", "square"] and rec["held_out"] is True


def test_sample_refuses_a_dataset_json_whose_fingerprint_was_edited(drun, tmp_path):
    """Held: a fingerprint that is not the dataset's is refused (the dataset 'changed since')."""
    run = _run_copy(drun, tmp_path)
    _edit_json(run / "dataset.json", lambda d: d.__setitem__("fingerprint", "0" * 16))
    _clean_exit_2(runner.invoke(app, ["sample", str(run), *QUICK_SAMPLE, "--out", str(tmp_path / "s")]), "changed since")


# ------------------------------------------------------------------------------------------------
# 6. mosaic report: a trial's edited table, and the figures of another samples folder
# ------------------------------------------------------------------------------------------------


def _forge_table(m):
    for k in ("joint", "color", "shape"):
        m["table"]["held_out"][k] = 0.987


def _forge_table_and_scores(m):
    _forge_table(m)
    ho = m["scores"]["held_out"]
    ho["joint_accuracy"] = 0.987
    ho["accuracy"] = {c: 0.987 for c in ho["accuracy"]}


@pytest.mark.parametrize("forge", [_forge_table, _forge_table_and_scores], ids=["table-only", "table-and-scores"])
def test_report_never_reports_a_held_out_figure_its_samples_do_not_give(swept, tmp_path, forge):
    import pandas as pd

    sw = _sweep_copy(swept, tmp_path)
    t = sorted((sw / "trials").iterdir())[0]
    _edit_json(t / "run" / "metrics.json", forge)
    r = runner.invoke(app, ["report", str(sw)])
    _no_traceback(r)
    if r.exit_code == 2:
        assert "metrics.json" in r.output, r.output
        return
    assert r.exit_code == 0, r.output
    df = pd.read_csv(sw / "results.csv")
    row = df[df["trial"] == t.name].iloc[0]
    (samples,) = [p for p in (t / "run" / "samples").iterdir() if (p / "metrics.json").is_file()]
    truth = json.loads((samples / "metrics.json").read_text())["held_out"]["joint_accuracy"]
    assert row["held_out.joint"] == pytest.approx(truth), (row["held_out.joint"], truth)


def test_report_of_an_unedited_sweep_copy_gives_its_samples_figures(swept, tmp_path):
    """No false alarm, and the reference of the case above: the copy's table is the samples' figure."""
    import pandas as pd

    sw = _sweep_copy(swept, tmp_path)
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(sw / "results.csv")
    for t in sorted((sw / "trials").iterdir()):
        (samples,) = [p for p in (t / "run" / "samples").iterdir() if (p / "metrics.json").is_file()]
        truth = json.loads((samples / "metrics.json").read_text())["held_out"]["joint_accuracy"]
        got = df[df["trial"] == t.name].iloc[0]["held_out.joint"]
        assert (got != got and truth is None) or got == pytest.approx(truth)


def test_report_samples_sheet_is_of_the_samples_folder_the_trials_figures_come_from(swept, tmp_path):
    from mosaic.preview import sample_sheet

    sw = _sweep_copy(swept, tmp_path)
    t = sorted((sw / "trials").iterdir())[0]
    run = t / "run"
    (scored,) = [p for p in (run / "samples").iterdir() if (p / "metrics.json").is_file()]
    r = runner.invoke(app, ["sample", str(run), "--guidance", "1", "--steps", "2", "-k", "1", "--device", "cpu", "--no-score"])
    assert r.exit_code == 0, r.output
    assert len(list((run / "samples").iterdir())) == 2
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    want = tmp_path / "want.png"
    sample_sheet(scored, want, n=16)
    got = sw / "report" / f"{t.name}-samples.png"
    assert hashlib.sha256(got.read_bytes()).digest() == hashlib.sha256(want.read_bytes()).digest()


# ------------------------------------------------------------------------------------------------
# 7. a trial folder holding another trial's run: the run's config compared without its dataset
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swept_spec(tmp_path_factory):
    """A finished two-trial sweep over a spec axis (``spec.splits.train`` 12 and 18): the trials' configs differ
    only in their dataset."""
    import yaml

    from tests.test_sweep_e2e import make_sweep

    base = tmp_path_factory.mktemp("a23sp")
    p = make_sweep(base)
    d = yaml.safe_load(p.read_text())
    d["grid"] = {"spec.splits.train": [12, 18]}
    p.write_text(yaml.safe_dump(d))
    r = runner.invoke(app, ["sweep", str(p), "--out", str(base / "out"), "--no-report"])
    assert r.exit_code == 0, r.output
    return p, base / "out"


def _swap_runs(sw: Path) -> tuple[Path, Path]:
    a, b = sorted((sw / "trials").iterdir())
    (a / "run").rename(sw / "x")
    (b / "run").rename(a / "run")
    (sw / "x").rename(b / "run")
    return a, b


def _rows_match_their_runs(sw: Path) -> None:
    """Each results row's ``spec.splits.train`` is the training-set size of the run in its trial folder."""
    import pandas as pd

    df = pd.read_csv(sw / "results.csv")
    for _, row in df.iterrows():
        m = json.loads((sw / "trials" / row["trial"] / "run" / "metrics.json").read_text())
        assert m["dataset"]["splits"]["train"] == row["spec.splits.train"], (row["trial"], m["dataset"]["splits"])


@pytest.mark.parametrize("command", ["report", "sweep"])
def test_runs_swapped_between_trials_of_a_spec_axis_are_refused(swept_spec, tmp_path, command):
    sw = _sweep_copy(swept_spec, tmp_path)
    a, _ = _swap_runs(sw)
    args = ["report", str(sw)] if command == "report" else ["sweep", str(swept_spec[0]), "--out", str(sw), "--no-report"]
    r = runner.invoke(app, args)
    _no_traceback(r)
    if r.exit_code == 2:
        assert "trials" in r.output, r.output
        return
    assert r.exit_code == 0, r.output
    _rows_match_their_runs(sw)


def test_a_spec_axis_sweep_copy_reports_each_trials_own_run(swept_spec, tmp_path):
    """No false alarm, and the reference of the case above: each row's axis value is its run's dataset size."""
    sw = _sweep_copy(swept_spec, tmp_path)
    r = runner.invoke(app, ["report", str(sw)])
    assert r.exit_code == 0, r.output
    _rows_match_their_runs(sw)


def test_runs_swapped_between_trials_with_the_axis_dropped_from_their_configs_are_refused(swept, tmp_path):
    """Round 20 refuses swapped trial folders, and runs whose config names another ``training.lr``; a run config without
    the field (read as "a run of an older mosaic") is not compared, so the swap is reported."""
    import yaml

    sw = _sweep_copy(swept, tmp_path)
    a, b = _swap_runs(sw)
    for t in (a, b):
        p = t / "run" / "config.yaml"
        c = yaml.safe_load(p.read_text())
        del c["training"]["lr"]
        p.write_text(yaml.safe_dump(c, sort_keys=False))
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "trials")


# ------------------------------------------------------------------------------------------------
# 8. evaluate: images of combinations the spec excludes (object-level holdout), scored as seen
# ------------------------------------------------------------------------------------------------

BIND_SPEC = """
name: bind
image: {size: 32}
concepts:
  color1: {values: [red, green, blue]}
  shape1: {values: [circle, square]}
  color2: {values: [red, green, blue]}
  shape2: {values: [circle, square]}
objects:
  - {name: left, shape: {concept: shape1}, color: {concept: color1}, size: 0.26}
  - {name: right, shape: {concept: shape2}, color: {concept: color2}, size: 0.26}
holdout:
  concepts: [color1, shape1, color2, shape2]
  rule: {kind: objects, slots: [[color1, shape1], [color2, shape2]], fraction: 0.2}
splits: {train: 40, val: 0, test_id: 4, test_ood: 4}
"""


@pytest.fixture(scope="module")
def excluded_folder(tmp_path_factory):
    """``(spec file, folder)``: a folder to evaluate of clean renders of combinations ``BIND_SPEC`` *excludes* (scenes
    mixing a seen and a held-out object type: no split shows them), drawn by the same spec without its holdout."""
    import yaml

    from mosaic.cellsets import EXCLUDED
    from mosaic.dataset import generate
    from mosaic.spec import load_spec, parse_spec

    base = tmp_path_factory.mktemp("a23bind")
    sp = base / "bind.yaml"
    sp.write_text(BIND_SPEC)
    spec = load_spec(sp)
    free = yaml.safe_load(BIND_SPEC)
    free.pop("holdout")
    free["splits"] = {"train": 0, "val": 0, "test": 60}
    generate(parse_spec(free), base / "free")
    out = base / "f"
    (out / "images").mkdir(parents=True)
    meta = []
    for line in (base / "free" / "test" / "metadata.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if spec.grid.status_of(rec["concepts"]) == EXCLUDED:
            shutil.copy(base / "free" / "test" / rec["file_name"], out / rec["file_name"])
            meta.append({"file_name": rec["file_name"], "concepts": rec["concepts"]})
    assert len(meta) >= 4
    return sp, out, meta


@pytest.mark.parametrize("flag", [False, None], ids=["held_out-false", "no-flag"])
def test_evaluate_never_scores_an_excluded_combination_as_seen(excluded_folder, tmp_path, flag):
    sp, src, meta = excluded_folder
    f = tmp_path / "f"
    shutil.copytree(src, f)
    (f / "metadata.jsonl").write_text("".join(json.dumps({**m, **({} if flag is None else {"held_out": flag})}) + "\n" for m in meta))
    r = runner.invoke(app, ["evaluate", str(f), "--spec", str(sp), "--check-n", "0", "-o", str(tmp_path / "out")])
    _no_traceback(r)
    if r.exit_code == 2:
        assert "exclude" in r.output, r.output
        return
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["seen"]["n"] == 0, m["seen"]


def test_evaluate_refuses_an_excluded_combination_flagged_held_out(excluded_folder, tmp_path):
    """Held: ``held_out: true`` on an excluded cell contradicts the spec (it does not hold it out) and is refused, named as excluded."""
    sp, src, meta = excluded_folder
    f = tmp_path / "f"
    shutil.copytree(src, f)
    (f / "metadata.jsonl").write_text("".join(json.dumps({**m, "held_out": True}) + "\n" for m in meta))
    _clean_exit_2(runner.invoke(app, ["evaluate", str(f), "--spec", str(sp), "--check-n", "0"]), "excludes")


# ------------------------------------------------------------------------------------------------
# 9. a run's records whose removal turns a check off
# ------------------------------------------------------------------------------------------------

def test_sample_refuses_another_runs_best_weights_with_their_record_removed(drun, swept, tmp_path):
    run = _run_copy(drun, tmp_path)
    assert (run / "final" / "weights.json").is_file()
    foreign = sorted((swept[1] / "trials").iterdir())[0] / "run" / "best"
    shutil.rmtree(run / "best")
    shutil.copytree(foreign, run / "best")
    (run / "best" / "weights.json").unlink()
    out = tmp_path / "s"
    r = runner.invoke(app, ["sample", str(run), *QUICK_SAMPLE, "--out", str(out)])
    _clean_exit_2(r, "weights.json")
    assert not (out / "metadata.jsonl").exists()


@pytest.fixture(scope="module")
def other_drawing(drun, tmp_path_factory):
    """``(samples folder of drun, spec file)``: the run's quick samples and a spec of the same concepts whose objects are
    drawn larger (size 0.3 instead of 0.5)."""
    import yaml

    from tests.test_diffusion import SPEC as D_SPEC

    base = tmp_path_factory.mktemp("a23draw")
    s = copy.deepcopy(D_SPEC)
    s["objects"][0]["size"] = 0.3
    (base / "other.yaml").write_text(yaml.safe_dump(s))
    run = base / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    r = runner.invoke(app, ["sample", str(run), *QUICK_SAMPLE, "--out", str(run / "samples" / "quick")])
    assert r.exit_code == 0, r.output
    return run, base / "other.yaml"


def _evaluate_other_drawing(other_drawing, tmp_path, damage):
    run0, spec = other_drawing
    run = tmp_path / "run"
    shutil.copytree(run0, run, symlinks=True)
    if damage is not None:
        damage(run / "dataset_manifest.json")
    return runner.invoke(app, ["evaluate", str(run / "samples" / "quick"), "--spec", str(spec), "--check-n", "0"])


def test_evaluate_refuses_a_spec_that_draws_a_runs_samples_otherwise(other_drawing, tmp_path):
    """Held: with the run's record intact, the other drawing is named."""
    _clean_exit_2(_evaluate_other_drawing(other_drawing, tmp_path, None), "draws them otherwise")


@pytest.mark.parametrize("damage", [lambda p: p.write_text("[]"), lambda p: p.write_bytes(b"\xff\xfe"), lambda p: p.unlink()],
                         ids=["a-list", "not-utf8", "deleted"])
def test_evaluate_of_a_runs_samples_never_skips_a_damaged_dataset_record(other_drawing, tmp_path, damage):
    r = _evaluate_other_drawing(other_drawing, tmp_path, damage)
    _no_traceback(r)
    assert r.exit_code == 2, r.output


# ------------------------------------------------------------------------------------------------
# 10. the latent cache: a record resealed over another split's latents
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ae_tiny(tmp_path_factory):
    """A tiny trained autoencoder folder (2 steps) and the latent test spec."""
    from tests.conftest import tiny_autoencoder

    folder, _, spec, _ = tiny_autoencoder(tmp_path_factory, "a23ae", steps=2)
    return folder, spec


def test_the_latent_cache_never_serves_held_out_latents_as_the_training_splits(ae_tiny, tmp_path):
    import torch

    from mosaic.dataset import generate
    from mosaic.lab.autoencoder import load_space
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset

    folder = tmp_path / "ae"
    shutil.copytree(ae_tiny[0], folder)
    ds = tmp_path / "ds"
    generate(ae_tiny[1], ds)
    space = load_space(folder)
    train = MosaicDataset(ds, "train").images[:4]
    ood = MosaicDataset(ds, "test_ood").images[:4]
    quiet = lambda s: None  # noqa: E731
    z_train = cached_latents(space, ds, "train", train, say=quiet)
    z_ood = cached_latents(space, ds, "test_ood", ood, say=quiet)
    assert not torch.equal(z_train, z_ood)
    (cache,) = [p for p in (folder / "latents").iterdir()]
    shutil.copyfile(cache / "test_ood.safetensors", cache / "train.safetensors")
    rec = json.loads((cache / "train.json").read_text())
    rec["sha256"] = hashlib.sha256((cache / "train.safetensors").read_bytes()).hexdigest()
    (cache / "train.json").write_text(json.dumps(rec, indent=2) + "\n")
    assert torch.equal(cached_latents(space, ds, "train", train, say=quiet), z_train)


# ------------------------------------------------------------------------------------------------
# 11. images to evaluate whose pixels depend on the reader: EXIF orientation, transparency
# ------------------------------------------------------------------------------------------------

def _folder_of(made, tmp_path, first) -> Path:
    """A folder to evaluate of the ``made`` dataset's test_ood images (records without held_out), its first image
    written again by ``first(PIL image, folder, record)``, which returns that record's new file_name."""
    from PIL import Image

    src = made[1] / "test_ood"
    f = tmp_path / "f"
    (f / "images").mkdir(parents=True)
    recs = []
    for k, line in enumerate((src / "metadata.jsonl").read_text().splitlines()):
        r = json.loads(line)
        rec = {"file_name": r["file_name"], "concepts": r["concepts"]}
        if k == 0:
            rec["file_name"] = first(Image.open(src / r["file_name"]).convert("RGB"), f)
        else:
            shutil.copy(src / r["file_name"], f / r["file_name"])
        recs.append(rec)
    (f / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


def _with_orientation(fmt: str, ext: str):
    def write(im, f: Path) -> str:
        from PIL import Image

        ex = Image.Exif()
        ex[0x0112] = 3  # rotate 180 degrees on display: browsers, HF datasets and ImageOps.exif_transpose apply it
        im.save(f / f"images/000000.{ext}", format=fmt, exif=ex.tobytes(), **({"quality": 100} if fmt == "JPEG" else {}))
        return f"images/000000.{ext}"
    return write


def _transparent(im, f: Path) -> str:
    import numpy as np
    from PIL import Image

    a = np.array(im.convert("RGBA"))
    a[..., 3] = 0  # every pixel fully transparent: a viewer shows the background, Pillow's convert("RGB") the hidden colours
    Image.fromarray(a, "RGBA").save(f / "images/000000.png")
    return "images/000000.png"


@pytest.mark.parametrize("write", [_with_orientation("JPEG", "jpg"), _with_orientation("PNG", "png"), _transparent],
                         ids=["jpeg-exif-rotate-180", "png-exif-rotate-180", "rgba-fully-transparent"])
def test_evaluate_refuses_an_image_whose_pixels_depend_on_the_reader(made, tmp_path, write):
    f = _folder_of(made, tmp_path, write)
    r = runner.invoke(app, ["evaluate", str(f), "--spec", str(made[1]), "--check-n", "0"])
    _clean_exit_2(r, "000000")


def test_evaluate_scores_a_plain_jpeg(made, tmp_path):
    """No false alarm: a JPEG without EXIF orientation is read."""
    f = _folder_of(made, tmp_path, lambda im, f: (im.save(f / "images/000000.jpg", format="JPEG", quality=100), "images/000000.jpg")[1])
    r = runner.invoke(app, ["evaluate", str(f), "--spec", str(made[1]), "--check-n", "0"])
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# 12. a dataset's split folder given by another path: the quick check skipped
# ------------------------------------------------------------------------------------------------

def _swapped_split(made, tmp_path) -> Path:
    """A copy of the ``made`` dataset whose test_ood images 0 and 1 were swapped (found by the digests only)."""
    ds = copy_dataset(made, tmp_path)
    a, b = ds / "test_ood" / "images" / "000000.png", ds / "test_ood" / "images" / "000001.png"
    ba, bb = a.read_bytes(), b.read_bytes()
    a.write_bytes(bb)
    b.write_bytes(ba)
    return ds


def test_evaluate_of_a_damaged_split_is_refused(made, tmp_path):
    """Held, the reference: the split folder by its own path is read after the dataset's quick check."""
    ds = _swapped_split(made, tmp_path)
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ds / "test_ood"), "--spec", str(made[0]), "--check-n", "0"]), "altered")


@pytest.mark.parametrize("via", ["link", "images-dotdot"])
def test_evaluate_of_a_damaged_split_by_another_path_is_refused(made, tmp_path, via):
    ds = _swapped_split(made, tmp_path)
    if via == "link":
        path = tmp_path / "split"
        path.symlink_to(ds / "test_ood", target_is_directory=True)
    else:
        path = Path(str(ds / "test_ood" / "images") + "/..")
    r = runner.invoke(app, ["evaluate", str(path), "--spec", str(made[0]), "--check-n", "0"])
    _clean_exit_2(r)
