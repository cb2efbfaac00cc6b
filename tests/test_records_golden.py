"""Every shipped spec's dataset stays byte-identical: every file (PNGs, masks, metadata.jsonl,
Parquet shards, manifest, checksums, card), at 1 and 2 workers, in both storage forms.

The digests in ``tests/data/records_golden.json`` were written from the code before the record
builder was rewritten (issue 27) by running this file as a script on a clean ``git archive`` of
that commit::

    PYTHONPATH=/tmp/mosaic-ref python tests/test_records_golden.py --write tests/data/records_golden.json COMMIT

Each spec is generated at small split sizes (:func:`small_overrides`) with small imagefolder
shards and Parquet shards, so several tasks, part files and shards are merged. The default suite
checks every spec in both forms with 1 worker (in this process) and 2 worker processes on two
specs; ``-m slow`` checks 2 workers on every spec.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "records_golden.json"
#: shipped specs of the flat renderer (the golden files predate the shaded renderer; its specs are
#: pinned by its own tests)
SHIPPED = sorted(p.stem for p in (ROOT / "experiments" / "specs").glob("*.yaml") if "renderer: shaded" not in p.read_text())
#: the specs of the golden file (a spec added later is named by the coverage test below)
SPECS = sorted({k.split("/")[0] for k in json.loads(GOLDEN.read_text())["digests"]}) if GOLDEN.is_file() else SHIPPED
FORMS = ("imagefolder", "parquet")
SHARD_SIZE = 8  # imagefolder samples per task: several part files per split
SHARD_BYTES = 16 * 1024  # Parquet: several shards per split
#: versions that decide the bytes besides mosaic's own code (a different build makes other bytes)
PINNED = ("python", "numpy", "pillow", "zlib", "pyarrow")


def small_overrides(raw: dict) -> list[str]:
    """``--set`` overrides giving every split of a spec a few samples (one per combination for
    ``per: combination`` specs, and specs with a holdout, which are made ``per: combination``)."""
    splits = raw.get("splits", {})
    per_comb = splits.get("per") == "combination" or "holdout" in raw
    out = ["splits.per=combination"] if per_comb and "per" in splits else []
    for k in splits:
        if k == "per":
            continue
        out.append(f"splits.{k}={1 if per_comb else (24 if k == 'train' else 8)}")
    return out


def load_small_spec(name: str):
    from mosaic.spec import apply_overrides, parse_spec, read_yaml

    raw = read_yaml(ROOT / "experiments" / "specs" / f"{name}.yaml")
    return parse_spec(apply_overrides(raw, small_overrides(raw)))


def dataset_digests(name: str, fmt: str, workers: int, masks: bool = False) -> dict[str, str]:
    """``relative path -> sha256[:16]`` of every file of the small dataset of spec ``name``."""
    from mosaic.dataset import generate

    spec = load_small_spec(name)
    with tempfile.TemporaryDirectory(prefix="mosaic-golden-") as tmp:
        out = Path(tmp) / "ds"
        kw = {"shard_size": SHARD_SIZE} if fmt == "imagefolder" else {"shard_bytes": SHARD_BYTES}
        generate(spec, out, workers=workers, format=fmt, masks=masks, **kw)
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                for p in sorted(out.rglob("*")) if p.is_file() and ".mosaic" not in p.relative_to(out).parts}


def versions() -> dict[str, str]:
    import pyarrow

    from mosaic.records import package_versions

    return {**package_versions(), "pyarrow": pyarrow.__version__}


def _golden() -> dict:
    g = json.loads(GOLDEN.read_text())
    now = versions()
    differ = {k: (g["versions"].get(k), now.get(k)) for k in PINNED if g["versions"].get(k) != now.get(k)}
    if differ:
        pytest.skip(f"golden digests were made with other package builds {differ}: regenerate them from a known-good commit")
    return g


#: files whose bytes another change alters on purpose after the digests were made, with the reason
#: (regenerate the digests from the commit that makes the change, then empty this)
CHANGED_ON_PURPOSE = {
    "README.md": "the dataset card's data_files and description (the integrity work on read paths, uncommitted when "
                 "these digests were made)",
}


def _compare(key: str, got: dict[str, str], want: dict[str, str]) -> None:
    changed = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k) and k not in CHANGED_ON_PURPOSE)
    assert not changed, f"{key}: {len(changed)} file(s) differ from the golden digests: {changed[:10]}"


@pytest.mark.parametrize("fmt", FORMS)
@pytest.mark.parametrize("name", SPECS)
def test_dataset_bytes_one_worker(name, fmt):
    g = _golden()
    _compare(f"{name}/{fmt}", dataset_digests(name, fmt, 1), g["digests"][f"{name}/{fmt}"])


@pytest.mark.parametrize("fmt", FORMS)
@pytest.mark.parametrize("name", ["count", "clevr_like"])
def test_dataset_bytes_with_masks(name, fmt):
    g = _golden()
    _compare(f"{name}/{fmt}/masks", dataset_digests(name, fmt, 1, masks=True), g["digests"][f"{name}/{fmt}/masks"])


@pytest.mark.parametrize("fmt", FORMS)
@pytest.mark.parametrize("name", ["count", "binding"])
def test_dataset_bytes_two_workers(name, fmt):
    g = _golden()
    _compare(f"{name}/{fmt}@2", dataset_digests(name, fmt, 2), g["digests"][f"{name}/{fmt}"])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMS)
@pytest.mark.parametrize("name", SPECS)
def test_dataset_bytes_two_workers_every_spec(name, fmt):
    g = _golden()
    _compare(f"{name}/{fmt}@2", dataset_digests(name, fmt, 2), g["digests"][f"{name}/{fmt}"])


@pytest.mark.parametrize("name", SHIPPED)
def test_record_line_is_the_json_of_the_record(name):
    """The JSON line written straight from the scene is ``json.dumps`` of the record, and the scene
    graph built from arrays is :meth:`Scene.to_dict` (bounding boxes, relations), on every spec."""
    from mosaic.records import sample_line, sample_record, scene_graph

    spec = load_small_spec(name)
    for split, n in spec.split_sizes().items():
        for i in range(min(n, 12)):
            rec, scene = sample_record(spec, split, i)
            assert scene_graph(scene) == scene.to_dict()
            assert rec["scene"] == scene.to_dict()
            line, head, _ = sample_line(spec, split, i, mask_file_name=f"masks/{i:06d}.png" if i % 2 else None)
            if i % 2:
                rec["mask_file_name"] = f"masks/{i:06d}.png"
            assert line == json.dumps(rec, sort_keys=True)
            assert head == {k: v for k, v in rec.items() if k != "scene"}


def test_golden_covers_every_shipped_spec():
    g = json.loads(GOLDEN.read_text())
    missing = set(SHIPPED) - {k.split("/")[0] for k in g["digests"]}
    assert not missing, f"shipped spec(s) {sorted(missing)} have no golden digests: add them (see the module docstring)"


def _write(path: str, made_from: str) -> None:
    """Write the golden digests of the code on ``sys.path`` (1 and 2 workers must agree)."""
    digests = {}
    for name in SHIPPED:
        for fmt in FORMS:
            one, two = dataset_digests(name, fmt, 1), dataset_digests(name, fmt, 2)
            if one != two:
                raise SystemExit(f"{name}/{fmt}: 1 and 2 workers differ in {sorted(k for k in one if one[k] != two.get(k))[:5]}")
            digests[f"{name}/{fmt}"] = one
            if name in ("count", "clevr_like"):
                digests[f"{name}/{fmt}/masks"] = dataset_digests(name, fmt, 1, masks=True)
            print(name, fmt, len(one), "files", flush=True)
    Path(path).write_text(json.dumps({"made_from": made_from, "versions": versions(), "digests": digests},
                                     indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--write":
        _write(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: python tests/test_records_golden.py --write FILE 'commit it was made from'")
