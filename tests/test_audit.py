"""The audit page (mosaic.audit): seeded sample, self-contained HTML with its data block, import of
the saved audit.json, human-agreement rate with its Wilson interval, and the page in a real
headless Chromium (skipped when Chromium or playwright-core is absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.audit import audit_page, audit_summary, collect_items, find_audit_files, import_audit, make_audit, verdict_of
from mosaic.cli import app
from mosaic.errors import MosaicError
from mosaic.evaluation.agreement import wilson_interval
from mosaic.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = ["name=audit_t", "image.size=32", "concepts.color.values=[red, green, blue, yellow]",
        "concepts.shape.values=[circle, square, triangle, cross]", "objects.0.size=0.5", "objects.0.rotation=0"]


def scored_folder(path: Path, n: int = 12) -> Path:
    """A samples folder as `mosaic sample` writes it: ground-truth renders, some drawn as blobs,
    read by the parser (abstention on), metadata.jsonl + predictions.jsonl + metrics.json."""
    from mosaic.dataset import png_bytes
    from mosaic.evaluation import metrics as M
    from mosaic.evaluation import prediction_rows, write_prediction_rows
    from mosaic.evaluation.check import ground_truth
    from mosaic.evaluation.parser import SceneParser
    from mosaic.evaluation.quality import bad_render, read_images
    from mosaic.sampling import sample_scene

    spec = load_spec(ROOT / "experiments/specs/coverage.yaml", SPEC)
    images, recs = ground_truth(spec, 0, n)
    images = images.copy()
    for i in range(0, n, 3):  # every third image is a peanut-shaped blob
        scene, _ = sample_scene(spec, "evaluator_check", i)
        images[i] = bad_render(scene, "peanut", 0, angle=30.0)
    (path / "images").mkdir(parents=True)
    meta = []
    for i, (im, r) in enumerate(zip(images, recs)):
        name = f"images/{i:06d}.png"
        (path / name).write_bytes(png_bytes(im))
        meta.append({"file_name": name, "concepts": r["concepts"], "held_out": r["held_out"]})
    (path / "metadata.jsonl").write_text("".join(json.dumps(m) + "\n" for m in meta))
    ev = SceneParser(spec)
    preds, reads = read_images(ev, images)
    write_prediction_rows(prediction_rows(meta, preds, spec, ev, images, reads=reads), path / "predictions.jsonl")
    M.write_metrics(M.score(meta, preds, spec), path, spec)  # written last, as `mosaic sample` does
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    scored_folder(root / "samples" / "test_ood_best")
    return root


def test_verdicts_and_seeded_sample(run_dir):
    items = collect_items(run_dir, n=5, seed=0)
    assert len(items) == 5 and [it["id"] for it in items] == list(range(5))
    assert items == collect_items(run_dir, n=5, seed=0)
    assert [it["file_name"] for it in items] != [it["file_name"] for it in collect_items(run_dir, n=5, seed=1)]
    assert len(collect_items(run_dir, n=500)) == 12  # all of them when fewer
    assert all(it["image"].startswith("data:image/png;base64,") for it in items)
    assert verdict_of({"correct": True, "read": {"a": 1}}) == "right"
    assert verdict_of({"correct": False, "read": {"a": None}}) == "unreadable"
    assert verdict_of({"correct": False, "read": {"a": 2}}) == "wrong"
    # the blobs were read as unreadable (abstention), the clean renders as right
    allv = collect_items(run_dir, n=12)
    by_name = {it["file_name"]: it["verdict"] for it in allv}
    assert by_name["images/000000.png"] == "unreadable" and by_name["images/000001.png"] == "right"


def test_page_embeds_its_data(run_dir, tmp_path):
    items = collect_items(run_dir, n=4)
    items[0]["reasons"] = ["</script><script>alert(1)</script>"]  # cannot close the data block
    html = audit_page(items, {"audit_id": "abc", "run": "r", "seed": 0, "n": 4}, marks={1: {"mark": "incorrect", "note": ""}})
    block = re.search(r'<script type="application/json" id="audit-data">(.*?)</script>', html, re.S).group(1)
    data = json.loads(block)
    assert data["meta"]["audit_id"] == "abc" and len(data["items"]) == 4
    assert data["items"][0]["reasons"] == ["</script><script>alert(1)</script>"]
    assert data["marks"] == {"1": {"mark": "incorrect", "note": ""}}
    assert "http://" not in html and "https://" not in html  # self-contained: works offline from file://


def _saved(items_json: Path, marks: list[str | None]) -> dict:
    meta = json.loads(items_json.read_text())
    return {"version": 1, "audit_id": meta["meta"]["audit_id"], "run": "x", "seed": 0, "saved": "now",
            "marks": [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": it["verdict"], "mark": m, "note": ""}
                      for it, m in zip(meta["items"], marks)]}


def test_import_summary_and_wilson(run_dir, tmp_path):
    out = tmp_path / "audit"
    page = make_audit(run_dir, n=10, seed=0, out=out)
    assert page.is_file() and (out / "items.json").is_file()
    saved = tmp_path / "download.json"
    saved.write_text(json.dumps(_saved(out / "items.json", ["correct"] * 8 + ["incorrect", None])))
    dst = import_audit(run_dir, saved, out=out)
    s = audit_summary(dst)
    assert (s["n"], s["marked"], s["agree"]) == (10, 9, 8)
    assert s["rate"] == pytest.approx(8 / 9)
    # Wilson 95 % interval of 8 / 9, by the closed form: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    z, n, p = 1.959963984540054, 9, 8 / 9
    c, h = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert s["interval"] == pytest.approx([c - h, c + h])
    assert s["interval"][0] == pytest.approx(0.5650, abs=1e-3) and s["interval"][1] == pytest.approx(0.9801, abs=1e-3)
    assert wilson_interval(0, 0) is None and wilson_interval(5, 5)[1] == 1.0
    # re-making the page keeps the marks of the matching audit
    make_audit(run_dir, n=10, seed=0, out=out)
    data = json.loads(re.search(r'id="audit-data">(.*?)</script>', (out / "audit.html").read_text(), re.S).group(1))
    assert sum(1 for m in data["marks"].values() if m["mark"]) == 9
    assert find_audit_files(tmp_path) == [dst]


def test_import_refuses_another_audit(run_dir, tmp_path):
    out = tmp_path / "audit"
    make_audit(run_dir, n=10, seed=0, out=out)
    other = _saved(out / "items.json", ["correct"] * 10)
    other["audit_id"] = "0123456789abcdef"
    f = tmp_path / "other.json"
    f.write_text(json.dumps(other))
    with pytest.raises(MosaicError, match="belongs to audit 0123456789abcdef"):
        import_audit(run_dir, f, out=out)
    bad = _saved(out / "items.json", ["maybe"] + ["correct"] * 9)
    f.write_text(json.dumps(bad))
    with pytest.raises(MosaicError, match=r"marks\[0\]\.mark = 'maybe'"):
        import_audit(run_dir, f, out=out)
    assert not (out / "audit.json").exists()


def test_cli_audit(run_dir, tmp_path):
    r = CliRunner().invoke(app, ["audit", str(tmp_path)])
    assert r.exit_code == 2 and "is not a run, samples, sweep or reproduction folder" in r.output
    (tmp_path / "config.yaml").write_text("name: r\n")
    r = CliRunner().invoke(app, ["audit", str(tmp_path)])
    assert r.exit_code == 2 and "holds no scored samples" in r.output
    out = tmp_path / "a"
    r = CliRunner().invoke(app, ["audit", str(run_dir), "--n", "6", "--out", str(out)])
    assert r.exit_code == 0, r.output
    f = tmp_path / "dl.json"
    f.write_text(json.dumps(_saved(out / "items.json", ["correct"] * 5 + ["incorrect"])))
    r = CliRunner().invoke(app, ["audit", str(run_dir), "--out", str(out), "--import", str(f)])
    assert r.exit_code == 0, r.output
    assert "5 of 6 verdicts correct" in r.output and "Wilson" in r.output


def _chromium() -> str | None:
    for c in (os.environ.get("MOSAIC_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and Path(c).is_file():
            return c
    return None


def _playwright() -> dict | None:
    """Environment in which `node` resolves playwright-core (NODE_PATH from MOSAIC_NODE_PATH), or None."""
    if shutil.which("node") is None:
        return None
    env = dict(os.environ)
    if os.environ.get("MOSAIC_NODE_PATH"):
        env["NODE_PATH"] = os.environ["MOSAIC_NODE_PATH"]
    ok = subprocess.run(["node", "-e", "require.resolve('playwright-core')"], env=env, capture_output=True, cwd=ROOT).returncode == 0
    return env if ok else None


@pytest.mark.skipif(_chromium() is None or _playwright() is None,
                    reason="needs Chromium (/usr/bin/chromium or MOSAIC_CHROMIUM) and node with playwright-core (MOSAIC_NODE_PATH)")
def test_page_in_headless_chromium(run_dir, tmp_path):
    out = tmp_path / "audit"
    page = make_audit(run_dir, n=8, seed=0, out=out)
    dl, shot = tmp_path / "saved.json", tmp_path / "shot.png"
    r = subprocess.run(["node", str(ROOT / "tests/browser/audit_page.js"), str(page), str(dl), str(shot), _chromium(), "5", "2"],
                       env=_playwright(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["errors"] == [] and res["cards"] == 8 and res["suggested"] == "audit.json"
    assert res["progress"] == "7 of 8 marked, 5 verdicts correct" == res["progress_after_reload"]
    assert shot.stat().st_size > 5000
    dst = import_audit(run_dir, dl, out=out)
    s = audit_summary(dst)
    assert (s["marked"], s["agree"]) == (7, 5)
    saved = json.loads(dl.read_text())
    assert saved["marks"][0]["note"] == "looks fine"
