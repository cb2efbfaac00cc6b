"""Attack round 26: hostile and mistaken folders met by every read path — folders to evaluate whose
records carry odd JSON (NUL bytes, lone surrogates, booleans and strings for numbers, keys twice, a
BOM, deep nesting), named pipes and YAML tags inside a dataset, YAML constructs that PyYAML turns into
unordered or foreign Python objects (``!!set``, ``!!binary``, dates), readers given odd split names
and paths, HF loading, links and races around run and evaluation outputs, planted pickles and HTML.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack26: ...")``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.conftest import (TINY_COUNT_SPEC, clean_exit_2, copy_dataset, edit_manifest, enospc as _enospc, run_cli as _run,
                            ok_cli as _ok)

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _no_traceback(r):
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _refused(r, *needles):
    """A verify-like result that names damage: exit 1 or 2, no traceback, every needle in the output."""
    _no_traceback(r)
    assert r.exit_code in (1, 2), r.output
    text = " ".join(r.output.split())
    for n in needles:
        assert n in text, r.output


def _tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file() and not f.is_symlink()}


# ------------------------------------------------------------------------------------------------
# a folder to evaluate (a copy of the tiny dataset's test_ood outside the dataset) with odd records
# ------------------------------------------------------------------------------------------------

def _eval_folder(made, tmp_path: Path) -> Path:
    f = tmp_path / "imgs"
    shutil.copytree(made[1] / "test_ood", f)
    return f


def _records(f: Path) -> list[dict]:
    return [json.loads(x) for x in (f / "metadata.jsonl").read_text().splitlines()]


def _write_records(f: Path, recs: list[dict]) -> str:
    text = "".join(json.dumps(r) + "\n" for r in recs)
    (f / "metadata.jsonl").write_text(text)
    return text


def _evaluate(made, f: Path, tmp_path: Path, *extra):
    return _run(["evaluate", f, "--spec", made[0], "-o", tmp_path / "out", "--check-n", "10", *extra])


def _set_first(field, value):
    def edit(recs):
        recs[0]["concepts" if field in ("color", "count") else field] = (
            {**recs[0]["concepts"], field: value} if field in ("color", "count") else value)
    return edit


_BAD_RECORDS = {
    "nul_in_file_name": (_set_first("file_name", "images/000000.png\u0000x"), "file_name"),
    "file_name_too_long": (_set_first("file_name", "images/" + "a" * 300 + ".png"), "File name too long"),
    "file_name_a_folder": (_set_first("file_name", "images"), "not a regular file"),
    "file_name_dotdot_back_in": (_set_first("file_name", "images/../images/000000.png"), ".."),
    "file_name_backslash": (_set_first("file_name", "images\\000000.png"), "missing"),
    "file_name_lone_surrogate": (_set_first("file_name", "images/\udcff.png"), "missing"),
    "count_true": (_set_first("count", True), "count"),
    "count_string": (_set_first("count", "1"), "count"),
    "count_zero": (_set_first("count", 0), "count"),
    "color_index": (_set_first("color", 0), "color"),
    "concepts_empty": (_set_first("concepts", {}), "missing"),
    "concepts_a_list": (_set_first("concepts", ["red", 1]), "concepts"),
}


@pytest.mark.parametrize("case", sorted(_BAD_RECORDS))
def test_evaluate_refuses_a_record_of_odd_json(made, tmp_path, case):
    edit, needle = _BAD_RECORDS[case]
    f = _eval_folder(made, tmp_path)
    recs = _records(f)
    edit(recs)
    _write_records(f, recs)
    r = _evaluate(made, f, tmp_path)
    _clean_exit_2(r, needle)
    assert not (tmp_path / "out" / "metrics.json").exists()


_BAD_TEXT = {
    "key_twice_held_out": (lambda s: s.replace('"held_out": true, "index": 0', '"held_out": false, "held_out": true, "index": 0', 1),
                           "given twice"),
    "concept_twice": (lambda s: s.replace('"concepts": {"color": "red"', '"concepts": {"color": "blue", "color": "red"', 1),
                      "given twice"),
    "nan_count": (lambda s: s.replace('"count": 1}', '"count": NaN}', 1), "count"),
    "infinity_count": (lambda s: s.replace('"count": 1}', '"count": Infinity}', 1), "count"),
    "huge_integer": (lambda s: s.replace('"count": 1}', '"count": ' + "1" * 5000 + "}", 1), "not valid JSON"),
    "deep_nesting": (lambda s: s.replace('"relations": []', '"relations": ' + "[" * 100000 + "]" * 100000, 1), "nested too deep"),
    "empty_file": (lambda s: "", "no records"),
    "only_whitespace": (lambda s: "\n \n\t\n", "no records"),
}


@pytest.mark.parametrize("case", sorted(_BAD_TEXT))
def test_evaluate_refuses_a_metadata_text_of_odd_json(made, tmp_path, case):
    edit, needle = _BAD_TEXT[case]
    f = _eval_folder(made, tmp_path)
    text = (f / "metadata.jsonl").read_text()
    new = edit(text)
    assert new != text
    (f / "metadata.jsonl").write_text(new)
    r = _evaluate(made, f, tmp_path)
    _clean_exit_2(r, needle)


def test_evaluate_refuses_a_metadata_file_with_a_bom(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    p = f / "metadata.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    _clean_exit_2(_evaluate(made, f, tmp_path), "metadata.jsonl")


def _held_out_figure(out: Path):
    m = json.loads((out / "metrics.json").read_text())
    return m["held_out"]


@pytest.mark.parametrize("form", ["crlf", "count_as_float", "count_as_exponent"])
def test_evaluate_reads_honest_variants_of_the_same_records_alike(made, tmp_path, form):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "-o", tmp_path / "ref", "--check-n", "10"])
    text = (f / "metadata.jsonl").read_text()
    if form == "crlf":
        text = text.replace("\n", "\r\n")
    elif form == "count_as_float":
        text = text.replace('"count": 1}', '"count": 1.0}')
    else:
        text = text.replace('"count": 1}', '"count": 1e0}')
    (f / "metadata.jsonl").write_text(text)
    r = _evaluate(made, f, tmp_path)
    _no_traceback(r)
    if r.exit_code == 2:
        return  # refusing is allowed; scoring otherwise is not
    assert r.exit_code == 0, r.output
    assert _held_out_figure(tmp_path / "out") == _held_out_figure(tmp_path / "ref")


# ------------------------------------------------------------------------------------------------
# named pipes and YAML tags inside a dataset (nothing opened that blocks, nothing constructed)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["manifest.json", "README.md", "checksums.sha256", "train/metadata.jsonl"])
def test_verify_names_a_fifo_in_a_dataset_without_blocking(made, tmp_path, name):
    ds = copy_dataset(made, tmp_path)
    (ds / name).unlink()
    os.mkfifo(ds / name)
    r = subprocess.run([sys.executable, "-m", "mosaic.cli", "verify", str(ds)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode in (1, 2) and "Traceback" not in out, out
    assert name.split("/")[-1] in out, out


def _card_header_insert(ds: Path, text: str) -> None:
    p = ds / "README.md"
    s = p.read_text()
    assert s.startswith("---\n")
    p.write_text("---\n" + text + s[4:])


def test_a_python_tag_in_the_card_is_never_constructed(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    flag = tmp_path / "PWNED"
    _card_header_insert(ds, f'x: !!python/object/apply:os.system ["touch {flag}"]\n')
    _refused(_run(["verify", ds]), "README.md")
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError):
        MosaicDataset(ds, "train")
    assert not flag.exists()


def test_an_alias_bomb_in_the_card_is_refused_quickly(made, tmp_path):
    import time

    ds = copy_dataset(made, tmp_path)
    bomb = "a0: &a0 [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    _card_header_insert(ds, bomb)
    t = time.monotonic()
    _refused(_run(["verify", ds]), "README.md")
    assert time.monotonic() - t < 60


# ------------------------------------------------------------------------------------------------
# YAML constructs PyYAML's safe loader still builds: unordered sets, binary, dates, python tags
# ------------------------------------------------------------------------------------------------

def _spec_text(made, old: str, new: str) -> str:
    text = made[0].read_text()
    assert old in text
    return text.replace(old, new, 1)


def _fingerprints(path: Path, seeds=range(6)) -> set[str]:
    """``mosaic validate PATH``'s fingerprint in processes of several hash seeds ("refused" for exit 2)."""
    import re

    got = set()
    for s in seeds:
        env = {**os.environ, "PYTHONHASHSEED": str(s)}
        r = subprocess.run([sys.executable, "-m", "mosaic.cli", "validate", str(path)], capture_output=True, text=True,
                           timeout=120, cwd=ROOT, env=env)
        out = r.stdout + r.stderr
        assert "Traceback" not in out, out
        if r.returncode == 2:
            got.add("refused")
            continue
        assert r.returncode == 0, out
        got.add(re.search(r"fingerprint ([0-9a-f]+)", out).group(1))
    return got


# fixed (was recorded): attack26: W: a YAML !!set of concept values is read in hash order: the same spec file gives another value order, fingerprint and dataset in each process
def test_a_spec_with_a_yaml_set_of_values_means_one_spec(made, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(_spec_text(made, "values: [red, green, blue]", "values: !!set {red, green, blue}"))
    assert len(_fingerprints(p)) == 1


# fixed (was recorded): attack26: W: a YAML !!set of holdout concepts is read in hash order: the same spec file gives two fingerprints (and combination keys) in two processes
def test_a_spec_with_a_yaml_set_of_holdout_concepts_means_one_spec(made, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(_spec_text(made, "concepts: [color, count]", "concepts: !!set {color, count}"))
    assert len(_fingerprints(p)) == 1


@pytest.mark.parametrize("old,new", [
    ("name: t", "name: 2024-01-01"),
    ("values: [red, green, blue]", "values: [red, green, 2024-01-01]"),
    ("name: t", "name: !!binary /w=="),
    ("name: t", 'name: !!python/object/apply:os.system ["echo hi"]'),
    ("name: t", "name: !!python/name:os.system"),
    ("values: [red, green, blue]", "values: [red, green, blue]\n    ? [a, b]\n    : 1"),
], ids=["date-name", "date-value", "binary-not-utf8", "python-apply", "python-name", "unhashable-key"])
def test_validate_refuses_yaml_objects_that_are_no_spec_values(made, tmp_path, old, new):
    p = tmp_path / "s.yaml"
    p.write_text(_spec_text(made, old, new))
    _clean_exit_2(_run(["validate", p]))


@pytest.mark.parametrize("value", ["!!python/object/apply:os.getpid []", "!!python/name:os.system", "!!timestamp 2001-01-01"])
def test_validate_refuses_a_tagged_set_value(made, value):
    _clean_exit_2(_run(["validate", made[0], "--set", f"seed={value}"]))


# ------------------------------------------------------------------------------------------------
# a finished run's own records (metrics.json, run.json, dataset.json) edited or damaged
# ------------------------------------------------------------------------------------------------

QUICK = ["--split", "test_ood", "-k", "1", "--steps", "2", "--device", "cpu", "--no-score"]


def _run_copy(drun, tmp_path: Path) -> Path:
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    return r


def _set_json(p: Path, key: str, value) -> None:
    d = json.loads(p.read_text())
    d[key] = value
    p.write_text(json.dumps(d))


def _dup_first(p: Path, key: str, first) -> None:
    """``p``'s JSON object with ``key`` given twice: ``first`` ahead of the file's own value (json.loads keeps the last)."""
    s = p.read_text()
    assert s.startswith("{")
    p.write_text("{" + json.dumps(key) + ": " + json.dumps(first) + ", " + s[1:])


def test_rerun_of_a_finished_run_is_a_noop(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    res = _ok(["train", "diffusion", r / "config.yaml", "--out", r])
    assert "done" in res.output


# fixed (was recorded): attack26: T: a finished run's metrics.json field of another type (table, samples, time_s, evaluator_check) is a traceback when `mosaic train` reruns the run
@pytest.mark.parametrize("key,value", [("table", 5), ("samples", 5), ("samples", {}), ("time_s", "x"), ("evaluator_check", 5)],
                         ids=["table-int", "samples-int", "samples-empty", "time-str", "check-int"])
def test_rerun_of_a_finished_run_with_a_damaged_metrics_field_is_named(drun, tmp_path, key, value):
    r = _run_copy(drun, tmp_path)
    _set_json(r / "metrics.json", key, value)
    _clean_exit_2(_run(["train", "diffusion", r / "config.yaml", "--out", r]), "metrics.json")


# fixed (was recorded): attack26: O: a run's metrics.json giving a key twice is read with json.loads (mosaic.lab.run.finished_metrics), not named as damage as docs promise for every JSON record
def test_rerun_of_a_finished_run_whose_metrics_give_a_key_twice_is_named(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    _dup_first(r / "metrics.json", "name", "other")
    _clean_exit_2(_run(["train", "diffusion", r / "config.yaml", "--out", r]), "metrics.json")


# fixed (was recorded): attack26: O: run.json giving its id twice (another run's first) is read with json.loads (RunFolder.run_id) and passes; docs list run.json among files where a key twice is damage
def test_sample_refuses_a_run_json_that_gives_its_id_twice(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    _dup_first(r / "run.json", "id", "0123456789abcdef0123456789abcdef")
    _clean_exit_2(_run(["sample", r, *QUICK, "--out", tmp_path / "s"]), "run.json")


# fixed (was recorded): attack26: O: dataset.json giving its fingerprint twice is read with json.loads (RunFolder) and passes; a reader keeping the first value sees another dataset
def test_sample_refuses_a_dataset_json_that_gives_a_key_twice(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    _dup_first(r / "dataset.json", "fingerprint", "0000000000000000")
    _clean_exit_2(_run(["sample", r, *QUICK, "--out", tmp_path / "s"]), "dataset.json")


def test_sample_never_constructs_a_python_tag_in_the_runs_config(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    flag = tmp_path / "PWNED"
    p = r / "config.yaml"
    p.write_text(f'x: !!python/object/apply:os.system ["touch {flag}"]\n' + p.read_text())
    _clean_exit_2(_run(["sample", r, *QUICK, "--out", tmp_path / "s"]), "config.yaml")
    assert not flag.exists()


def test_sample_never_unpickles_weights_planted_in_place_of_safetensors(drun, tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'PWNED'}",))

    r = _run_copy(drun, tmp_path)
    for d in (r / "best" / "backbone", r / "final" / "backbone"):
        (d / "diffusion_pytorch_model.bin").write_bytes(pickle.dumps(Boom()))
        (d / "diffusion_pytorch_model.safetensors").unlink()
    res = _run(["sample", r, *QUICK, "--out", tmp_path / "s"])
    _clean_exit_2(res)
    assert not (tmp_path / "PWNED").exists()


# ------------------------------------------------------------------------------------------------
# mosaic audit: hostile texts in a scored samples folder, odd --n, a full disk between its two files
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scored(drun, tmp_path_factory):
    """A copy of the ``drun`` run whose samples folder was scored (``evaluate -o`` itself)."""
    base = tmp_path_factory.mktemp("a26scored")
    r = base / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    (s,) = [p for p in (r / "samples").iterdir() if p.is_dir()]
    _ok(["evaluate", s, "--spec", r / "dataset", "--check-n", "10", "-o", s])
    return s


def _samples_copy(scored, tmp_path: Path) -> Path:
    r = tmp_path / "run"
    shutil.copytree(scored.parent.parent, r, symlinks=True)
    return r / "samples" / scored.name


def _edit_predictions(s: Path, edit) -> None:
    p = s / "predictions.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    edit(rows)
    p.write_text("".join(json.dumps(x) + "\n" for x in rows))


def test_audit_page_never_runs_markup_from_a_predictions_reason(scored, tmp_path):
    import html5lib

    s = _samples_copy(scored, tmp_path)

    def edit(rows):
        rows[0]["reasons"] = ["</script><img src=x onerror=alert(1)>", "<!--<script>", "]]><svg onload=alert(2)>"]
    _edit_predictions(s, edit)
    _ok(["audit", s])
    doc = html5lib.parse((s / "audit" / "audit.html").read_text(), namespaceHTMLElements=False)
    assert not [e.tag for e in doc.iter() if any(str(k).startswith("on") for k in e.attrib)]
    assert not doc.findall(".//svg")


def test_audit_with_a_lone_surrogate_in_a_reason_is_written_or_named(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)

    def edit(rows):
        rows[0]["reasons"] = ["bad \udcff char"]
    _edit_predictions(s, edit)
    r = _run(["audit", s])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output


@pytest.mark.parametrize("n,code", [("-1", 2), ("0", 2), ("99999999999999999999", 0), ("1e3", 2)])
def test_audit_n_out_of_range_is_named_or_means_all(scored, tmp_path, n, code):
    s = _samples_copy(scored, tmp_path)
    r = _run(["audit", s, "--n", n, "-o", tmp_path / "au"])
    _no_traceback(r)
    assert r.exit_code == code, r.output


@pytest.mark.parametrize("where", ["items.json", "audit.html"])
def test_audit_on_a_full_disk_leaves_no_temp_and_a_rerun_finishes(scored, tmp_path, monkeypatch, where):
    import mosaic.audit as A

    s = _samples_copy(scored, tmp_path)
    real = A.atomic_write

    def write(path, data):
        if str(path).endswith(where):
            _enospc()
        return real(path, data)
    monkeypatch.setattr(A, "atomic_write", write)
    _clean_exit_2(_run(["audit", s]), "disk is full")
    assert not [p for p in (s / "audit").iterdir() if ".tmp" in p.name] if (s / "audit").exists() else True
    monkeypatch.setattr(A, "atomic_write", real)
    _ok(["audit", s])
    assert (s / "audit" / "audit.html").is_file() and (s / "audit" / "items.json").is_file()


# ------------------------------------------------------------------------------------------------
# readers given odd split names, odd paths; HF loading of folders whose names fsspec might read
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("split", ["../ds/train", "train/", "./train", "TRAIN", "train\x00", "", None, 0, "images", ".mosaic"])
def test_mosaic_dataset_refuses_a_split_name_that_is_no_split(made, split):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError):
        MosaicDataset(made[1], split)


def test_streaming_dataset_given_a_datasets_card_is_a_named_error(made):
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset

    with pytest.raises(MosaicError):
        StreamingDataset(made[1] / "README.md", "train")


@pytest.mark.parametrize("name,sibling", [("b{a,b}", "ba"), ("p%41", "pA"), ("h#x", "h")], ids=["braces", "percent", "hash"])
def test_hf_load_of_a_folder_whose_name_fsspec_might_read_gives_its_own_rows(made, tmp_path, name, sibling):
    from mosaic.hf_load import load_dataset

    other = tmp_path / sibling / "ds"
    other.parent.mkdir()
    _ok(["generate", made[0], "--set", "seed=5", "--out", other])
    own = tmp_path / name / "ds"
    own.parent.mkdir()
    shutil.copytree(made[1], own)
    want = [json.loads(x)["caption"] for x in (made[1] / "train" / "metadata.jsonl").read_text().splitlines()]
    got = load_dataset(own, split="train", cache_dir=str(tmp_path / "hf"))
    assert list(got["caption"]) == want
