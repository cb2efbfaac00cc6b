"""Issue 23, classes 4, 6 and 7 on the files that make claims: audit marks must be the audit's own,
HTML pages escape every text and data block (checked with html5lib, a spec-conformant parser),
a learned evaluator's saved accuracy is never trusted unmeasured, damaged evaluator and sweep
files are named errors, and a moved sweep folder resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.audit import audit_page, audit_summary, import_audit, make_audit
from mosaic.cli import app
from mosaic.errors import MosaicError

html5lib = pytest.importorskip("html5lib")
runner = CliRunner()

HOSTILE = ["<!--<script>", "</script><script>alert(1)</script>", "<script>", "]]></script>", "\u2028x", "&lt;b&gt;",
           "<img src=x onerror=alert(1)>", "'\"><svg/onload=1>"]


def _items(text: str) -> list[dict]:
    return [{"id": 0, "source": ".", "file_name": f"images/{text}.png", "held_out": False, "intended": {"color": text},
             "read": {"color": text}, "verdict": "right", "reasons": [text], "image": "data:image/png;base64,AA=="}]


@pytest.mark.parametrize("text", HOSTILE)
def test_the_audit_page_data_block_survives_any_text(text):
    page = audit_page(_items(text), {"audit_id": "a" * 16, "run": text, "seed": 0, "n": 1, "created": "now"})
    doc = html5lib.parse(page, treebuilder="dom")
    scripts = doc.getElementsByTagName("script")
    assert len(scripts) == 2, f"the text {text!r} changed the page's scripts"
    data = scripts[0]
    assert data.getAttribute("id") == "audit-data"
    block = "".join(n.data for n in data.childNodes)
    back = json.loads(block)
    assert back["items"][0]["intended"]["color"] == text and back["meta"]["run"] == text
    assert "<" not in block  # HTML's script data states never see a "<"
    title = doc.getElementsByTagName("title")[0]
    assert "".join(n.data for n in title.childNodes) == f"mosaic audit: {text}"


def test_the_report_page_escapes_trial_names_and_sweep_text(tmp_path):
    import pandas as pd
    import yaml

    from mosaic.report import make_report

    sweep = tmp_path / "sw"
    (sweep / "trials").mkdir(parents=True)
    name = "<script>alert(1)</script>"
    (sweep / "sweep.yaml").write_text(yaml.safe_dump({"name": name, "description": "<!--", "kind": "<b>", "config": "x"}))
    pd.DataFrame([{"trial": "t'><script>x</script>", "status": "failed", "error": "</pre><script>", "seed": 0,
                   "held_out.joint": 0.1, "seen.joint": 0.2}]).to_csv(sweep / "results.csv", index=False)
    page = make_report(sweep, warn=lambda m: None)
    doc = html5lib.parse(page.read_text(), treebuilder="dom")
    assert doc.getElementsByTagName("script").length == 0
    assert "".join(n.data for n in doc.getElementsByTagName("h1")[0].childNodes) == name


@pytest.fixture(scope="module")
def audit_root(tmp_path_factory):
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("audit") / "run"
    scored_folder(root / "samples" / "a", n=10)
    (root / "config.yaml").write_text("name: r\n")
    make_audit(root, n=10, seed=0)
    return root


def _saved(root: Path, marks) -> Path:
    items = json.loads((root / "audit" / "items.json").read_text())
    p = root / "dl.json"
    p.write_text(json.dumps({"version": 1, "audit_id": items["meta"]["audit_id"], "marks": marks(items["items"])}))
    return p


@pytest.mark.parametrize("kind", ["invented", "repeated", "renamed", "bool_id"])
def test_audit_marks_must_be_the_audits_own_each_once(audit_root, kind):
    def marks(items):
        own = [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": it["verdict"], "mark": "correct"}
               for it in items]
        if kind == "invented":
            return own + [{"id": 1000 + k, "source": ".", "file_name": "x", "verdict": "right", "mark": "correct"} for k in range(1000)]
        if kind == "repeated":
            return own + own
        if kind == "renamed":
            own[0]["file_name"] = "images/other.png"
            return own
        own[0]["id"] = True
        return own

    with pytest.raises(MosaicError, match="this audit|twice|marks item"):
        import_audit(audit_root, _saved(audit_root, marks))
    assert not (audit_root / "audit" / "audit.json").exists()


def test_an_edited_stored_audit_is_named_by_the_summary(audit_root, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(audit_root, root)

    def marks(items):
        return [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": it["verdict"], "mark": "correct"}
                for it in items]

    import_audit(root, _saved(root, marks))
    s = audit_summary(root / "audit" / "audit.json")
    assert s["marked"] == 10
    stored = root / "audit" / "audit.json"
    data = json.loads(stored.read_text())
    data["marks"] += [dict(m, id=m["id"] + 100) for m in data["marks"]]
    stored.write_text(json.dumps(data))
    with pytest.raises(MosaicError, match="not an item of this audit"):
        audit_summary(stored)
    stored.write_bytes(b"\xff\xfe")
    with pytest.raises(MosaicError, match="cannot be read as JSON"):
        audit_summary(stored)


# ------------------------------------------------------------------------------------------------
# evaluator folders
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def evaluator_dir(tmp_path_factory):
    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec

    spec = parse_spec({"name": "ev", "image": {"size": 16}, "concepts": {"color": {"values": ["red", "blue"]}},
                       "objects": [{"name": "o", "shape": "circle", "color": {"concept": "color"}, "size": 0.5}],
                       "splits": {"train": 4, "val": 0, "test": 2}})
    out = tmp_path_factory.mktemp("ev") / "ev"
    train_evaluator(spec, out, LearnedConfig(steps=2, batch_size=4, n_train=8, check_n=8, input_size=16, width=4, threads=1))
    return spec, out


def test_an_edited_evaluator_report_is_never_trusted(evaluator_dir, tmp_path):
    from mosaic.evaluation import load_evaluator
    from mosaic.evaluation.check import evaluator_accuracy

    spec, out = evaluator_dir
    d = tmp_path / "ev"
    shutil.copytree(out, d)
    rep = json.loads((d / "report.json").read_text())
    rep["check_clean"]["accuracy"] = {c: 1.0 for c in rep["check_clean"]["accuracy"]}
    rep["check_clean"]["passed"] = True
    (d / "report.json").write_text(json.dumps(rep))
    acc = evaluator_accuracy(spec, load_evaluator(spec, str(d)), n=16)
    assert acc["source"] == "fresh check" and acc["n"] == 16
    assert acc["saved_accuracy"] == {"color": 1.0}
    assert acc["saved_disagrees"] == (["color"] if acc["accuracy"]["color"] < 0.95 else [])


@pytest.mark.parametrize("damage", ["config_not_json", "config_deep", "config_list", "weights_garbage", "weights_other_shape",
                                    "report_not_utf8", "config_no_concepts"])
def test_a_damaged_evaluator_folder_is_named(evaluator_dir, tmp_path, damage):
    spec, out = evaluator_dir
    d = tmp_path / "ev"
    shutil.copytree(out, d)
    cfg = d / "config.json"
    if damage == "config_not_json":
        cfg.write_text("{")
    elif damage == "config_deep":
        cfg.write_text("[" * 100000)
    elif damage == "config_list":
        cfg.write_text("[]")
    elif damage == "weights_garbage":
        (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    elif damage == "weights_other_shape":
        from safetensors.torch import load_file, save_file

        w = load_file(str(d / "model.safetensors"))
        k = next(k for k, v in w.items() if v.numel() > 1)
        w[k] = w[k].flatten()[:1].clone()
        save_file(w, str(d / "model.safetensors"))
    elif damage == "report_not_utf8":
        (d / "report.json").write_bytes(b"\xff\xfe")
    else:
        meta = json.loads(cfg.read_text())
        del meta["concepts"]
        cfg.write_text(json.dumps(meta))
    folder = tmp_path / "imgs"
    (folder / "images").mkdir(parents=True)
    from mosaic.evaluation.check import ground_truth
    from mosaic.dataset import png_bytes

    ims, recs = ground_truth(spec, 0, 2)
    for i, (im, r) in enumerate(zip(ims, recs)):
        (folder / f"images/{i}.png").write_bytes(png_bytes(im))
    (folder / "metadata.jsonl").write_text("".join(json.dumps({"file_name": f"images/{i}.png", "concepts": r["concepts"]}) + "\n"
                                                   for i, r in enumerate(recs)))
    import yaml

    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec.to_dict()))
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(tmp_path / "spec.yaml"), "--evaluator", str(d), "--check-n", "0"])
    assert r.exit_code == 2 and str(d) in r.output.replace("\n", "") and "Traceback" not in r.output, (damage, r.output, r.exception)


# ------------------------------------------------------------------------------------------------
# sweep folders: damaged trial files, a moved folder
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,content", [("trial.json", b"{"), ("trial.json", b"\xff"), ("trial.json", b"[1]"),
                                          ("run/metrics.json", b"[" * 100000), ("run/metrics.json", b"null")])
def test_mosaic_report_names_an_edited_trial_file(tmp_path, name, content):
    sweep = tmp_path / "sw"
    t = sweep / "trials" / "t0"
    (t / "run").mkdir(parents=True)
    (sweep / "sweep.yaml").write_text("name: s\n")
    (t / "trial.json").write_text(json.dumps({"id": "t0", "status": "done", "values": {"seed": 0}}))
    (t / "run" / "metrics.json").write_text(json.dumps({"table": None}))
    from tests.conftest import finished_trial_files

    finished_trial_files(t)
    (t / name).write_bytes(content)
    r = runner.invoke(app, ["report", str(sweep)])
    assert r.exit_code == 2 and name.split("/")[-1] in r.output and "Traceback" not in r.output, (r.output, r.exception)


def test_a_moved_sweep_folder_is_not_refused_as_another_config(tmp_path):
    import yaml

    from mosaic.sweep import load_sweep
    from mosaic.trials import _refuse_changed_trials, _trial_raw, plan
    from tests.test_sweep import sweep_file

    CFG = {"name": "r", "dataset": {"spec": "experiments/specs/count_composition.yaml"}, "training": {"steps": 5}}
    s = load_sweep(sweep_file(tmp_path, CFG, grid={"training.lr": [1e-3, 1e-4]}))
    a = tmp_path / "a"
    for t in plan(s, a):  # the trial folders as a first run of the sweep wrote them
        t["dir"].mkdir(parents=True)
        (t["dir"] / "config.yaml").write_text(yaml.safe_dump(_trial_raw(t), sort_keys=False))
    b = tmp_path / "moved" / "b"
    b.parent.mkdir()
    shutil.move(str(a), str(b))
    _refuse_changed_trials(plan(s, b))  # out and dataset.path differ: the same trials, resumed
    changed = load_sweep(sweep_file(tmp_path, CFG, grid={"training.lr": [1e-3, 1e-4]}, set={"training.steps": 7}))
    with pytest.raises(MosaicError, match="(?s)another config.*training.steps"):
        _refuse_changed_trials(plan(changed, b))
