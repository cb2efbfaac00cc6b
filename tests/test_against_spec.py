"""`mosaic verify --against-spec`: a forgery that rewrote files *and* their digests (which the digest
checks cannot see) is found by making every sample again from the manifest's spec (issue 23)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.spec import parse_spec
from tests.test_integrity_reads import SPEC  # the integrity tests' small 3 x 2 grid with a diagonal holdout

runner = CliRunner()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from mosaic.dataset import generate

    root = tmp_path_factory.mktemp("forged")
    generate(parse_spec(SPEC), root / "img", masks=True)
    generate(parse_spec(SPEC), root / "pq", format="parquet", shard_bytes=4096)
    return root


def _copy(base, tmp_path, name):
    out = tmp_path / name
    shutil.copytree(base / name, out, symlinks=True)
    return out


def _redigest(ds: Path) -> None:
    """What a forger does after editing files: every digest written again to match, so the digest
    checks pass (checksums.sha256, its sha256, files and bytes in the manifest)."""
    man = json.loads((ds / "manifest.json").read_text())
    lines, per_split = [], {}
    for line in (ds / "checksums.sha256").read_text().splitlines():
        _, rel = line.split("  ", 1)
        data = (ds / rel).read_bytes()
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {rel}")
        if not rel.endswith("metadata.jsonl"):
            per_split[rel.split("/")[0]] = per_split.get(rel.split("/")[0], 0) + len(data)
    text = "\n".join(lines) + "\n"
    (ds / "checksums.sha256").write_text(text)
    man["checksums"].update(sha256=hashlib.sha256(text.encode()).hexdigest(), bytes=per_split)
    (ds / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    _recard(ds)


def _recard(ds: Path) -> None:
    """The card written again for the forged manifest (what `verify --repair` would do for it)."""
    from mosaic.repair import rewrite_card

    rewrite_card(ds, json.loads((ds / "manifest.json").read_text()))


def _verify(ds, *extra):
    return runner.invoke(app, ["verify", str(ds), *extra])


def test_a_whole_dataset_matches_its_spec(base, tmp_path):
    for name in ("img", "pq"):
        r = _verify(_copy(base, tmp_path, name), "--against-spec")
        assert r.exit_code == 0, r.output
        assert "against the spec" in r.output


def test_labels_moved_to_another_seen_value_with_their_digests_rewritten(base, tmp_path):
    ds = _copy(base, tmp_path, "img")
    meta = ds / "train" / "metadata.jsonl"
    recs = [json.loads(x) for x in meta.read_text().splitlines()]
    from mosaic.holdout import is_held_out
    from mosaic.spec import parse_spec

    spec = parse_spec(SPEC)
    r = recs[3]
    # another *seen* value, with every field that follows from the concepts (the quick check refuses a record whose
    # labels, combination or held_out flag contradict its concepts: mosaic.records.record_claims)
    other = next(c for c in ("red", "green", "blue")
                 if c != r["concepts"]["color"] and not is_held_out(spec, {**r["concepts"], "color": c}))
    r["concepts"]["color"] = other
    r["labels"]["color"] = ["red", "green", "blue"].index(other)
    r["combination"] = [other, r["combination"][1]]  # the holdout's grid is color x shape
    # and the scene graph and caption with them (the quick check refuses a record that is not its own scene graph's:
    # mosaic.records.scene_record_check); only the image still shows the old colour
    old = r["scene"]["objects"][0]["color"]
    r["scene"]["objects"][0].update(color=other, rgb=list(spec.palette[other]))
    r["caption"] = r["caption"].replace(old, other)
    meta.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in recs))
    _redigest(ds)
    r = _verify(ds)  # the digests agree; the leak check counted again from the records sees the cell counts move (round 23)
    assert r.exit_code == 1 and "leak_check.counts" in " ".join(r.output.split()), r.output
    r = _verify(ds, "--against-spec")
    assert r.exit_code == 1, r.output
    assert "train/metadata.jsonl:4" in r.output and "not the spec's" in r.output
    assert "--overwrite --masks" in " ".join(r.output.split())  # the fix makes the same form again
    r = _verify(ds, "--against-spec", "--repair")  # --repair trusts the digests: it must not report a repair
    assert r.exit_code == 1 and "repaired" not in r.output


def test_an_image_and_a_mask_swapped_with_their_digests_rewritten(base, tmp_path):
    ds = _copy(base, tmp_path, "img")
    a, b = ds / "train" / "images" / "000001.png", ds / "train" / "images" / "000002.png"
    da, db = a.read_bytes(), b.read_bytes()
    assert da != db
    a.write_bytes(db)
    b.write_bytes(da)
    m = ds / "test_ood" / "masks" / "000000.png"
    m.write_bytes((ds / "test_ood" / "masks" / "000001.png").read_bytes())
    _redigest(ds)
    assert _verify(ds).exit_code == 0
    r = _verify(ds, "--against-spec", "--max-lines", "10")
    assert r.exit_code == 1
    for path in ("train/images/000001.png", "train/images/000002.png"):
        assert path in r.output
    from mosaic.against_spec import against_spec
    from mosaic.verify import verify

    man = json.loads((ds / "manifest.json").read_text())
    rep = against_spec(ds, man, verify(ds, deep=True))
    assert {d.path for d in rep.damage} >= {"train/images/000001.png", "train/images/000002.png", "test_ood/masks/000000.png"}
    assert not rep.repairable


def test_a_parquet_shard_rewritten_with_other_rows_and_its_digest(base, tmp_path):
    ds = _copy(base, tmp_path, "pq")
    man = json.loads((ds / "manifest.json").read_text())
    shard = man["shards"]["train"][0]
    path = ds / "data" / shard["name"]
    t = pq.read_table(path)
    rows = t.to_pylist()
    rows[0]["caption"] = rows[0]["caption"] + " "  # one row's caption changed, every digest rewritten
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)
    data = path.read_bytes()
    shard.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (ds / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    _recard(ds)
    assert _verify(ds).exit_code == 0  # the digests agree: only the spec can tell
    r = _verify(ds, "--against-spec")
    assert r.exit_code == 1, r.output
    assert f"data/{shard['name']}" in r.output and "not the spec's" in r.output
    assert "--format parquet --shard-mb" in " ".join(r.output.split())


def test_against_spec_is_skipped_when_the_manifest_itself_is_damaged(base, tmp_path):
    ds = _copy(base, tmp_path, "img")
    man = json.loads((ds / "manifest.json").read_text())
    man["spec"]["splits"]["train"] = 13  # the spec edited: the fingerprint check names it; nothing is regenerated from it
    (ds / "manifest.json").write_text(json.dumps(man))
    r = _verify(ds, "--against-spec")
    assert r.exit_code == 2 and "manifest.json is damaged" in r.output  # refused before anything is made from its spec
    assert "not the spec's" not in r.output


@pytest.mark.parametrize("name,rows", [("../../etc/hostname", None), ("sub/x.parquet", None), (7, None), (None, -3), (None, True)])
def test_a_shard_record_that_mosaic_does_not_write_is_named_and_not_read(base, tmp_path, name, rows):
    ds = _copy(base, tmp_path, "pq")
    man = json.loads((ds / "manifest.json").read_text())
    rec = man["shards"]["train"][0]
    if name is not None:
        rec["name"] = name
    if rows is not None:
        rec["rows"] = rows
    (ds / "manifest.json").write_text(json.dumps(man))
    r = _verify(ds, "--against-spec")
    assert r.exit_code in (1, 2), r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
