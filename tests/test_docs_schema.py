"""`mosaic schema {spec,config,sweep}`: JSON Schemas from the pydantic models validate every shipped
file, refuse what the models refuse by field, and the shipped copies and YAML comments are current."""

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.file_schemas import KINDS, dumps, json_schema
from mosaic.overrides import safe_load

ROOT = Path(__file__).resolve().parents[1]


def _hook(name):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


schemas = _hook("schemas")


@functools.lru_cache(maxsize=None)
def _validator(kind):
    return jsonschema.Draft202012Validator(json_schema(kind))


@pytest.mark.parametrize("path", schemas.shipped_yaml(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_yaml_validates_against_its_schema_and_names_it(path):
    kind = schemas.kind_of(path)
    text = path.read_text(encoding="utf-8")
    assert text.partition("\n")[0] == schemas.comment_for(path), f"run `python docs/hooks/schemas.py`"
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(kind).iter_errors(safe_load(text))]
    assert not errors, errors
    target = (path.parent / schemas.comment_for(path)[len(schemas.PREFIX):]).resolve()
    assert target == schemas.schema_file(kind) and target.exists()


def test_the_shipped_schemas_are_what_mosaic_schema_prints():
    runner = CliRunner()
    for kind in KINDS:
        r = runner.invoke(app, ["schema", kind])
        assert r.exit_code == 0, r.output
        assert r.output == dumps(kind)
        assert schemas.schema_file(kind).read_text(encoding="utf-8") == r.output, \
            f"docs/schemas/{kind}.schema.json is stale: run `python docs/hooks/schemas.py`"
        assert json.loads(r.output)["$schema"].startswith("https://json-schema.org/")


def test_the_schema_refuses_what_the_models_refuse_by_name():
    spec = safe_load((ROOT / "experiments/specs/count.yaml").read_text())
    v = _validator("spec")
    assert not list(v.iter_errors(spec))
    bad = json.loads(json.dumps(spec))
    bad["concepts"]["color"]["valuse"] = bad["concepts"]["color"].pop("values")
    assert any("valuse" in e.message for e in v.iter_errors(bad))
    bad = json.loads(json.dumps(spec))
    bad["image"]["size"] = 4                                  # ImageSpec.size >= 8
    assert any(list(e.absolute_path) == ["image", "size"] for e in v.iter_errors(bad))
    # the shorthands the before-validators expand are accepted, others are not
    bad = json.loads(json.dumps(spec))
    bad["objects"][0]["color"] = "red"
    bad["concepts"]["color"]["distribution"] = "uniform"
    assert not list(v.iter_errors(bad))
    bad["concepts"]["color"]["distribution"] = "gaussian"
    assert list(v.iter_errors(bad))
    cfg = safe_load((ROOT / "experiments/train/quickstart_cpu.yaml").read_text())
    cfg["training"]["stepz"] = 3
    assert any("stepz" in e.message for e in _validator("config").iter_errors(cfg))


def test_mosaic_schema_writes_a_file_and_refuses_bad_input(tmp_path):
    runner = CliRunner()
    out = tmp_path / "spec.json"
    r = runner.invoke(app, ["schema", "spec", "--out", str(out)])
    assert r.exit_code == 0 and out.read_text() == dumps("spec")
    r = runner.invoke(app, ["schema", "specs"])
    assert r.exit_code == 2 and "spec" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["schema", "sweep", "--out", "/dev/null"])
    assert r.exit_code == 2 and "--out" in r.output


def test_the_comment_adder_inserts_one_line_and_leaves_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(schemas, "SCHEMA_DIR", tmp_path / "docs" / "schemas")
    d = tmp_path / "experiments" / "specs"
    d.mkdir(parents=True)
    f = d / "x.yaml"
    body = "# a comment\nname: x\n"
    f.write_text(body)
    assert schemas.add_comment(f)
    assert f.read_text() == "# yaml-language-server: $schema=../../docs/schemas/spec.schema.json\n" + body
    assert not schemas.add_comment(f)                      # idempotent
    f.write_text("# yaml-language-server: $schema=old.json\n" + body)
    assert schemas.add_comment(f) and f.read_text().count("yaml-language-server") == 1


def test_the_check_mode_names_stale_files():
    r = subprocess.run([sys.executable, str(ROOT / "docs/hooks/schemas.py"), "--check"], capture_output=True, text=True)
    tracked = set(subprocess.run(["git", "ls-files", "experiments"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    stale = [line for line in r.stdout.splitlines() if line.split(":")[0] in tracked or line.startswith("docs/")]
    assert not stale, stale
