"""Hostile cases of a twelfth attack on the data path (issue 23), each closed at its mechanism, and the
leftovers of the eleventh.

- **The record checks ran twice per read**: the quick check (:func:`mosaic.verify.check_before_read`)
  checked every record's text, names and claims, then :func:`mosaic.dataset.iter_metadata` checked the
  same records again. A ``metadata.jsonl`` whose bytes the quick check found clean is remembered by its
  sha256 (:func:`mosaic.checksums.metadata_checked`); the reader reads the file whole, hashes the very
  bytes it parses, and checks them only when they are not those bytes.
- **``spec_from_data`` cached by sorted JSON**: two specs that differ only in the order of their
  concepts (or in ``1`` against ``"1"`` as a key) were one cache entry, so the second got the first's
  concept order. :func:`mosaic.records.spec_key` is exact.
- **Unbounded reads of user files**: a sweep's ``sweep.yaml`` (``mosaic report``, ``reproduce``), an
  audit's ``audit.json``, the reproduce registry, a run's logs and ``config.yaml`` (aliases), a
  lock's owner record, a manifest read for its hash; and a ``metadata.jsonl`` line (or a part file of an
  unfinished dataset) of gigabytes, sparse on disk, was read whole by ``verify`` and every reader.
  Every such file goes through :func:`mosaic.io.read_bounded` or :func:`mosaic.checksums.bounded_lines`.
- **Names that look one**: object names were not checked at all (a zero-width space, a trailing space,
  ``Ball`` beside ``ball``); a name written wholly in Cyrillic or Greek look-alikes (``асе`` beside
  ``ace``) passed the one-script rule. :func:`mosaic.spec_names.skeleton` compares what names look like.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2, hold_lock
from tests.test_attack_cases8 import data  # noqa: F401 (fixture: a 16 px dataset with masks)
from tests.test_checksums import _peak  # peak traced bytes of a call

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def _copy(data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(data, root)
    return root


# ------------------------------------------------------------------------------------------------
# leftover a: the record checks run once per read
# ------------------------------------------------------------------------------------------------

def _count_claims(monkeypatch) -> list[int]:
    import mosaic.dataset
    import mosaic.records
    import mosaic.verify

    calls = [0]
    real = mosaic.records.record_claims

    def counting(spec, split):
        check = real(spec, split)

        def counted(rec):
            calls[0] += 1
            return check(rec)
        return counted

    monkeypatch.setattr(mosaic.verify, "record_claims", counting)
    monkeypatch.setattr(mosaic.dataset, "record_claims", counting)
    return calls


def test_a_dataset_read_checks_each_record_once(tmp_path, data, monkeypatch):
    import mosaic.checksums
    from mosaic.torch_data import MosaicDataset

    root = _copy(data, tmp_path)
    calls = _count_claims(monkeypatch)
    n_all = sum(json.loads((root / "manifest.json").read_text())["splits"][s]["count"] for s in ("train", "val", "test_id", "test_ood"))
    ds = MosaicDataset(root, "train", load_masks=True)
    assert calls[0] == n_all  # the quick check's pass over every split, and none again for the train records
    calls[0] = 0
    MosaicDataset(root, "train", load_masks=True, verify=False)  # the same bytes, checked in this process: not again
    assert calls[0] == 0
    mosaic.checksums._CHECKED.clear()  # a new process: no quick check, so the reader checks every record itself
    MosaicDataset(root, "train", load_masks=True, verify=False)
    assert calls[0] == len(ds)


def test_bytes_changed_after_the_quick_check_are_checked_by_the_reader(tmp_path, data):
    """The reader skips the checks only for the very bytes the quick check found clean."""
    from mosaic.dataset import iter_metadata
    from mosaic.errors import DatasetError
    from mosaic.verify import check_before_read

    root = _copy(data, tmp_path)
    man = check_before_read(root)
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["held_out"] = not rec["held_out"]
    lines[1] = json.dumps(rec, sort_keys=True)
    p.write_text("\n".join(lines) + "\n")  # after the check, before the read
    with pytest.raises(DatasetError, match=r"metadata\.jsonl:2"):
        list(iter_metadata(root, "train", man))


# ------------------------------------------------------------------------------------------------
# leftover b: spec_from_data's cache key is exact
# ------------------------------------------------------------------------------------------------

def test_specs_that_differ_only_in_concept_order_are_two_specs(data):
    from mosaic.records import spec_from_data

    spec = json.loads((data / "manifest.json").read_text())["spec"]
    flipped = {**spec, "concepts": dict(reversed(list(spec["concepts"].items())))}
    assert list(flipped["concepts"]) != list(spec["concepts"])
    for first, second in ((spec, flipped), (flipped, spec)):
        assert list(spec_from_data(first).concepts) == list(first["concepts"])
        assert list(spec_from_data(second).concepts) == list(second["concepts"])


# ------------------------------------------------------------------------------------------------
# leftover c: every JSON / YAML / text file of a user's folder is read with a bound
# ------------------------------------------------------------------------------------------------

#: calls that read a whole file or parse one without a bound, and the places that may make them
UNBOUNDED = {"read_text", "read_bytes", "safe_load", "load"}
ALLOWED = {
    ("mosaic/io.py", "read_bytes"),  # none: the bounded reader itself
    ("mosaic/against_spec.py", "read_bytes"),  # a sample file whose size was just compared with the PNG it must be
    ("mosaic/export.py", "read_bytes"),  # a dataset's image, after the quick check bounded its size and form (source locked)
    ("mosaic/verdicts.py", "read_text"),  # experiments/reproduce.yaml of the installed package, not a user's folder
    ("mosaic/verdicts.py", "safe_load"),
    ("mosaic/overrides.py", "load"),  # yaml.load(text, Loader=UniqueKeyLoader): text already bounded
}


def test_no_user_file_is_read_without_a_bound():
    found = []
    for path in sorted((ROOT / "mosaic").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in UNBOUNDED:
                owner = node.func.value
                if node.func.attr == "load" and not (isinstance(owner, ast.Name) and owner.id in ("yaml", "json")):
                    continue  # torch / safetensors / pickle loads are their own cases (no pickle is loaded anywhere)
                if (rel, node.func.attr) not in ALLOWED:
                    found.append(f"{rel}:{node.lineno} .{node.func.attr}(")
    assert not found, "read these through mosaic.io.read_bounded / read_json / overrides.read_yaml_file:\n" + "\n".join(found)


def test_a_metadata_line_of_gigabytes_is_refused_without_being_held(tmp_path, data):
    """A sparse file: one line of 256 MiB costs no disk, and was read whole by verify and every reader."""
    from mosaic.dataset import iter_metadata
    from mosaic.errors import DatasetError
    from mosaic.verify import verify

    root = _copy(data, tmp_path)
    p = root / "train" / "metadata.jsonl"
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size + (256 << 20))
    rep = None

    def check():
        nonlocal rep
        rep = verify(root)
    assert _peak(check) < 100 << 20  # one bounded line and its blocks (the file's 256 MiB were held before)
    assert not rep.ok and any("longer than" in d.detail for d in rep.damage), rep.problems()

    def read():
        with pytest.raises(DatasetError, match="longer than"):
            list(iter_metadata(root, "train"))
    assert _peak(read) < 100 << 20
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "longer than 16,777,216 bytes" in res.output, res.output


def test_a_planted_part_file_of_gigabytes_is_refused_without_being_held(tmp_path):
    from mosaic.dataset import generate
    from mosaic.errors import DatasetError
    from mosaic.verify import verify
    from tests.test_attack_cases5 import interrupted_generation

    spec, ds, part = interrupted_generation(tmp_path)
    head = part.read_bytes().split(b"\n", 1)[0]
    part.write_bytes(head + b"\n")
    with open(part, "r+b") as f:
        f.truncate(len(head) + 1 + (256 << 20))  # one record line of 256 MiB, sparse

    def rerun():
        with pytest.raises(DatasetError, match="part file .*train-000000.jsonl is damaged"):
            generate(spec, ds)
    assert _peak(rerun) < 100 << 20  # the body was read whole: 256 MiB
    part.unlink()
    generate(spec, ds)
    assert verify(ds, deep=True).ok


@pytest.mark.parametrize("where", ["audit_json", "sweep_yaml", "registry"])
def test_a_fifo_or_oversized_file_in_a_users_folder_is_refused_never_waited_on(tmp_path, where):
    """``read_bounded`` opens O_NONBLOCK: a FIFO at a file's name is refused at once (``read_text`` waited
    for a writer forever); a file larger than its bound is refused unread."""
    import signal

    from mosaic.errors import MosaicError
    from mosaic.io import FileReadError, read_bounded, read_json
    from mosaic.reproduce import load_registry

    fifo = tmp_path / "x"
    os.mkfifo(fifo)

    def hung(*_):
        raise TimeoutError("the read of a FIFO blocked")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        if where == "audit_json":
            with pytest.raises(FileReadError, match="FIFO"):
                read_json(fifo)
        elif where == "sweep_yaml":
            from mosaic.report import read_sweep_yaml
            sweep = tmp_path / "sweep"
            sweep.mkdir()
            os.mkfifo(sweep / "sweep.yaml")
            with pytest.raises(MosaicError, match="sweep.yaml.*FIFO"):
                read_sweep_yaml(sweep)
        else:
            with pytest.raises(MosaicError, match="FIFO"):
                load_registry(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(2 << 20)
    with pytest.raises(FileReadError, match="more than"):
        read_bounded(big, 1 << 20)


def test_a_billion_laughs_run_config_is_refused_on_resume(tmp_path):
    """A run's config.yaml read back on resume was yaml.safe_load: its aliases unbounded."""
    from mosaic.errors import TrainingError
    from mosaic.lab.run_folder import RunFolder

    run = tmp_path / "run"
    run.mkdir()
    laughs = "a: &a [" + ", ".join(["x"] * 10) + "]\n"
    for k in range(1, 9):
        prev = chr(ord("a") + k - 1)
        laughs += f"{chr(ord('a') + k)}: &{chr(ord('a') + k)} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    (run / "config.yaml").write_text(laughs)
    with pytest.raises(TrainingError, match="config.yaml is damaged"):
        RunFolder(run).read_config()


# ------------------------------------------------------------------------------------------------
# leftover d: names that look one are refused, naming the field, the names and the fix
# ------------------------------------------------------------------------------------------------

_BASE = {"name": "t", "seed": 0, "image": {"size": 16},
         "concepts": {"color": {"values": ["red", "blue"]}, "shape": {"values": ["circle", "square"]}},
         "objects": [{"name": "ball", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.3}],
         "splits": {"train": 8, "val": 0, "test": 0}}


def _extra(name):
    return {"name": name, "shape": "circle", "color": "red", "size": 0.2}


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["objects"].append(_extra("ball\u200b")), "objects: object name 'ball\\\\u200b' holds U+200B"),
    (lambda d: d["objects"].append(_extra("ball ")), "object name 'ball ' has a leading, trailing or double space"),
    (lambda d: d["objects"].append(_extra("Ball")), "object names 'ball' and 'Ball' differ only"),
    (lambda d: d["objects"].append(_extra("ｂａｌｌ")), "object names 'ball' and"),
    (lambda d: d["objects"].append(_extra("b\u0430ll")), "mixes letters of CYRILLIC, LATIN"),
    (lambda d: d.setdefault("distractors", []).append({**_extra("BALL"), "repeat": {"range": [0, 1]}}), "distractors: object names 'BALL' and 'ball'"),
    (lambda d: (d.update(colors={"ace": [1, 2, 3], "\u0430\u0441\u0435": [3, 2, 1]}), d["concepts"]["color"].update(values=["ace", "\u0430\u0441\u0435"])),
     "colour names 'ace' and '\\\\u0430\\\\u0441\\\\u0435' differ only in case, character form or look-alike letters"),
    (lambda d: (d.update(colors={"\u03bf": [3, 2, 1]}), d["concepts"]["color"].update(values=["red", "\u03bf"]),
                d["objects"].append({**_extra("o2"), "color": "blue"})), None),  # a Greek omicron alone is a name of its own
    (lambda d: d.update(colors={"\u0455\u0456\u0445": [1, 2, 3]}), None),  # Cyrillic 'ѕіх' alone: no twin in its list
    (lambda d: d.update(colors={"\u0455\u0456\u0445": [1, 2, 3], "six": [3, 2, 1]}), "colour names"),
    (lambda d: d.update(colors={"\u0441\u0443\u0430\u043d": [1, 2, 3]}), None),  # 'суан' does not look like the built-in cyan
    (lambda d: d.update(colors={"\u0435\u0430\u0441\u0445": [1, 2, 3], "EACX": [3, 2, 1]}), "colour names"),
    (lambda d: d.update(sizes={"\u0442\u0456\u0440": 0.1, "tip": 0.2}), "size names"),
])
def test_names_that_look_one_are_refused_naming_the_field_and_the_fix(tmp_path, edit, said):
    spec = copy.deepcopy(_BASE)
    edit(spec)
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec, allow_unicode=True))
    res = runner.invoke(app, ["generate", str(p), "--out", str(tmp_path / "out")])
    if said is None:
        assert res.exit_code == 0, res.output
        return
    _clean_exit_2(res, "rename")
    assert said in res.output.replace("\n  ", " ") or said.replace("\\\\", "\\") in res.output, res.output
    assert not (tmp_path / "out").exists()


# ================================================================================================
# the attack: new hostile cases
# ================================================================================================

def _laughs(levels: int = 8) -> str:
    """YAML text of ten to the ``levels`` items from a few hundred bytes ("billion laughs")."""
    text, prev = "- &a [" + ", ".join(["x"] * 10) + "]\n", "a"
    for k in range(1, levels):
        cur = chr(ord("a") + k)
        text += f"- &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
        prev = cur
    return text


def _alarm(seconds: int):
    import signal

    def hung(*_):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    return lambda: (signal.alarm(0), signal.signal(signal.SIGALRM, old))


# ------------------------------------------------------------------------------------------------
# case 01-02: a sweep axis value that is YAML text: a billion laughs hung `mosaic sweep`, 100,000 deep crashed it
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["laughs", "deep"])
def test_a_sweep_axis_value_holding_hostile_yaml_text_is_named_never_a_hang_or_traceback(tmp_path, value):
    """An axis value is compared through its YAML reading (``[0, 2]`` and ``"[0, 2]"`` are one value);
    a string value holding a billion laughs was expanded (a hang), one nested 30,000 deep a RecursionError."""
    from tests.test_sweep_e2e import make_sweep

    text = _laughs() if value == "laughs" else "[" * 30000 + "]" * 30000
    p = make_sweep(tmp_path)  # a tiny diffusion sweep (16 px)
    sweep = yaml.safe_load(p.read_text())
    sweep["grid"] = {"training.lr": [0.001, text]}
    p.write_text(yaml.safe_dump(sweep))
    done = _alarm(60)
    try:
        res = runner.invoke(app, ["sweep", str(p), "--out", str(tmp_path / "out"), "--dry-run"])
    finally:
        done()
    _clean_exit_2(res, "training.lr")
    assert not isinstance(res.exception, (RecursionError, TimeoutError)), res.exception


# ------------------------------------------------------------------------------------------------
# case 03-04: an interrupted log write: a torn last line blocked every rerun; the resume's truncation lost the logs
# ------------------------------------------------------------------------------------------------

def _interrupted(drun, tmp_path: Path) -> Path:
    """A copy of a finished 2-step run as a run killed during step 2: its last checkpoint step 1."""
    from tests.test_attack_cases6 import _copy_run

    run = _copy_run(drun, tmp_path)
    for name in ("DONE", "metrics.json", "final", "best", "samples", "checkpoints/checkpoint-0000002"):
        p = run / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    return run


def test_a_rerun_after_a_torn_log_line_finishes(tmp_path, drun):  # noqa: F811
    """Killed (or the disk full) while appending step 2's row: log.jsonl ends in half a line. A rerun
    refused the log ("line 2 is not a log row") until someone edited it by hand."""
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import config

    run = _interrupted(drun, tmp_path)
    log = run / "log.jsonl"
    first, second = log.read_bytes().splitlines(keepends=True)[:2]
    log.write_bytes(first + second[: len(second) // 2])
    res = run_diffusion(config(run, drun[1], steps=2, checkpoint_every=1), say=lambda s: None)
    assert (run / "DONE").is_file() and res
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]


def test_the_resumes_log_truncation_never_loses_the_kept_rows(tmp_path, drun, monkeypatch):  # noqa: F811
    """truncate_logs unlinked log.jsonl, log.csv and val.jsonl, then appended the kept rows again: an
    interruption between (a kill, a full disk) lost every row of the run's history."""
    import errno

    import mosaic.io
    import mosaic.lab.run_folder as rf

    run = _interrupted(drun, tmp_path)
    before = {n: (run / n).read_bytes() for n in ("log.jsonl", "log.csv")}

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(rf, "open_append", full)
    monkeypatch.setattr(rf, "atomic_write", full)
    monkeypatch.setattr(mosaic.io, "new_temp_file", full)
    with pytest.raises(OSError):
        rf.RunFolder(run).truncate_logs(1)
    assert {n: (run / n).read_bytes() for n in before} == before


# ------------------------------------------------------------------------------------------------
# case 05: two sweeps into one folder
# ------------------------------------------------------------------------------------------------

def test_a_second_sweep_into_a_folder_being_swept_stops_naming_the_first(tmp_path):
    """Without a lock the second sweep ran the first's trials again beside it: each refused by its run
    folder's lock and marked failed in trial.json while the first still trained."""
    from tests.test_sweep_e2e import make_sweep

    p = make_sweep(tmp_path)
    out = tmp_path / "sw"
    holder = hold_lock(out)
    try:
        res = runner.invoke(app, ["sweep", str(p), "--out", str(out)])
        _clean_exit_2(res, "another process", "sweep folder")
        assert not (out / "trials").exists() and not (out / "results.csv").exists()
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------
# case 06-07: a Parquet shard whose pages decompress to gigabytes (a resealed decompression bomb)
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pq16(data, tmp_path_factory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("pq12") / "pq"
    res = runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _bomb(root: Path, column: str, mb: int, as_mosaic: bool) -> None:
    """Row 0's ``column`` made ``mb`` MiB of one letter, written ZSTD (as mosaic writes the text columns,
    with mosaic's row groups, or with pyarrow's defaults), the shard resealed (size, sha256, card)."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from mosaic.hf import write_card
    from mosaic.parquet import _writer_with
    from mosaic.spec import parse_spec

    man = json.loads((root / "manifest.json").read_text())
    shard = man["shards"]["train"][0]
    p = root / "data" / shard["name"]
    t = pq.ParquetFile(p).read()
    rows = t.to_pylist()
    if column == "caption":
        rows[0]["caption"] = "a" * (mb << 20)
    else:
        rows[0]["image"]["bytes"] = b"\0" * (mb << 20)
    t = pa.Table.from_pylist(rows, schema=t.schema)
    if as_mosaic:
        with _writer_with(p, t.schema) as w:
            w.write_table(t, row_group_size=1024)
    else:
        pq.write_table(t, p, compression="zstd")
    shard.update(bytes=p.stat().st_size, sha256=hashlib.sha256(p.read_bytes()).hexdigest())
    (root / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    write_card(root, parse_spec(man["spec"]), man, "parquet")


@pytest.mark.parametrize("column, as_mosaic", [("caption", True), ("image", False)])
def test_a_parquet_decompression_bomb_is_refused_before_any_page_is_decompressed(tmp_path, pq16, column, as_mosaic):
    """A 256 MiB cell stored in a few hundred KB: verify (its caption column is never read there) said OK,
    and every reader decompressed it (a 1.2 GB caption took 4 GB of memory in MosaicDataset)."""
    import pyarrow as pa

    from mosaic.dataset import iter_metadata
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "pq"
    shutil.copytree(pq16, root)
    _bomb(root, column, 256, as_mosaic)
    assert (root / "data").stat().st_size < 64 << 20
    pool = pa.default_memory_pool()
    base = pool.max_memory()
    for quick in ([], ["--quick"]):
        res = runner.invoke(app, ["verify", str(root), *quick])
        assert res.exit_code == 1 and "shard is damaged" in res.output, res.output
        assert "decompression bomb" in " ".join(res.output.split()), res.output
    for read in (lambda: MosaicDataset(root, "train"), lambda: MosaicDataset(root, "train", verify=False),
                 lambda: list(iter_metadata(root, "train"))):
        with pytest.raises(DatasetError, match="shard is damaged"):
            read()
    assert pool.max_memory() - base < 64 << 20  # no page of the bomb was decompressed


# ------------------------------------------------------------------------------------------------
# case 08: a link on a page mosaic writes whose target is a sweep folder's name
# ------------------------------------------------------------------------------------------------

def test_a_sweep_folder_named_like_a_url_scheme_is_linked_as_a_path(tmp_path):
    """reproduce's index.html linked each sweep's report by its folder's relative path, escaped but not
    encoded: a sweep named ``javascript:alert(1)`` gave ``href='javascript:alert(1)/report/index.html'``,
    which a browser runs as script when clicked."""
    from urllib.parse import unquote, urlparse

    import html5lib

    from mosaic.reproduce import write_reproduction_report

    out = tmp_path / "repro"
    out.mkdir()
    names = ["javascript:alert(1)", "data:text/html,<script>x</script>", "a b'c\"d"]
    sweeps = [{"name": n, "report": str(out / n.replace("/", "_") / "report" / "index.html"), "done": 1, "trials": 1, "failed": 0,
               "seconds": 1.0} for n in names]
    res = {"paper": "p", "scale": "cpu", "title": "t", "source": None, "statements": {}, "missing": [], "sweeps": sweeps,
           "claims": [], "seconds": 1.0}
    page = write_reproduction_report(res, out)
    doc = html5lib.parse(page.read_text(), treebuilder="dom")
    hrefs = [a.getAttribute("href") for a in doc.getElementsByTagName("a")]
    assert len(hrefs) == len(names)
    for href, s in zip(hrefs, sweeps):
        assert urlparse(href).scheme == "" and href.startswith("./"), href
        assert unquote(href) == "./" + Path(s["report"]).relative_to(out).as_posix()


# ------------------------------------------------------------------------------------------------
# case 09: a trial's log.txt of gigabytes, read whole to quote its tail
# ------------------------------------------------------------------------------------------------

def test_a_failed_trials_log_is_quoted_from_its_tail_never_read_whole(tmp_path):
    """run_trial quoted the last 15 lines of log.txt by read_text(): a trial folder whose log.txt is a
    sparse file of 512 MiB (or a log grown over a long run) was read whole into memory."""
    from mosaic.trials import run_trial

    peaks = {}
    for size in (0, 512 << 20):
        tdir = tmp_path / f"trial{size}"
        tdir.mkdir()
        (tdir / "trial.json").write_text(json.dumps({"id": "trial", "status": "pending", "kind": "diffusion"}))
        with open(tdir / "log.txt", "wb") as f:
            f.truncate(size)
        holder: dict = {}
        peaks[size] = _peak(lambda: holder.update(run_trial("diffusion", str(tdir))))  # no config.yaml: fails at once
        assert holder["status"] == "failed" and "config" in holder["error"], holder
    assert peaks[512 << 20] - peaks[0] < 16 << 20, peaks  # the subprocess's own buffers aside, nothing of the log held
