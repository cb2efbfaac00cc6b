import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import SPECS, tiny

runner = CliRunner()


def test_validate_prints_a_summary():
    r = runner.invoke(app, ["validate", str(SPECS / "count.yaml")])
    assert r.exit_code == 0, r.output
    assert "color" in r.output and "count" in r.output and "fingerprint" in r.output


def test_generate_and_preview(tmp_path, write_spec):
    p = write_spec(tiny(SPECS / "position_complex.yaml"))
    out = tmp_path / "ds"
    r = runner.invoke(app, ["generate", str(p), "--out", str(out), "--workers", "2", "--set", "splits.train=20"])
    assert r.exit_code == 0, r.output
    assert len(list((out / "train" / "images").glob("*.png"))) == 20
    first = r.output
    r = runner.invoke(app, ["generate", str(p), "--out", str(out), "--set", "splits.train=20"])  # finished: no-op
    assert r.exit_code == 0
    assert "already complete" in r.output and "nothing written" in r.output and "already complete" not in first
    order = lambda txt: [w for w in txt.replace(",", " ").replace("(", " ").split() if w in ("train", "val", "test")]
    assert order(r.output)[:3] == order(first)[:3] == ["train", "val", "test"]  # the spec's split order both times
    png = tmp_path / "grid.png"
    r = runner.invoke(app, ["preview", str(p), "--out", str(png), "--n", "6"])
    assert r.exit_code == 0, r.output
    assert Image.open(png).size[0] > 300
    r = runner.invoke(app, ["preview", str(p), "--out", str(tmp_path / "val.png"), "--n", "2", "--split", "validation"])
    assert r.exit_code == 0, r.output  # HF's name for val, as MosaicDataset and the dataset card use it


def test_commands_on_a_folder_that_does_not_exist_say_so(tmp_path):
    for args in (["export", str(tmp_path / "nope"), "--format", "parquet"],):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output, r.output
        assert not (tmp_path / "nope").exists() and not (tmp_path / "nope-parquet").exists()


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["objects"][0].update(color="rde"), "did you mean 'red'"),
    (lambda d: d["objects"][0].update(size=0), "objects[0].size"),
    (lambda d: d["positions"][0].update(reference="refrence"), "positions[0].reference"),
    (lambda d: d["concepts"]["color"].update(values=["red", "blu"]), "did you mean 'blue'"),
])
def test_bad_specs_fail_cleanly_and_write_nothing(tmp_path, write_spec, mutate, expect):
    d = yaml.safe_load((SPECS / "position.yaml").read_text())
    mutate(d)
    p = write_spec(d)
    out = tmp_path / "never"
    r = runner.invoke(app, ["generate", str(p), "--out", str(out)])
    assert r.exit_code == 2
    assert expect in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_yaml_error_and_impossible_layout_write_nothing(tmp_path, write_spec):
    p = write_spec("name: x\nobjects:\n  - {name: a, shape: circle\n")
    r = runner.invoke(app, ["generate", str(p), "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "line" in r.output and not (tmp_path / "a").exists()
    p = write_spec("""
    name: crowded
    image: {size: 32}
    concepts: {count: {range: [30, 30]}}
    objects: [{name: a, shape: circle, color: red, size: 0.2, repeat: {concept: count}}]
    """)
    r = runner.invoke(app, ["generate", str(p), "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "objects[0].repeat up to 30" in r.output and not (tmp_path / "b").exists()


def test_errors_print_brackets_literally_and_name_the_overrides(tmp_path):
    r = runner.invoke(app, ["validate", str(SPECS / "count.yaml"), "--set", "concepts.color.values=[red, gren]"])
    assert r.exit_code == 2
    assert "{name: [r, g, b]}" in r.output and "with --set concepts.color.values=[red, gren]" in r.output


def test_a_dataset_stands_for_its_spec(tmp_path, write_spec):
    from mosaic.dataset import generate
    from mosaic.spec import load_spec, parse_spec

    spec = parse_spec(tiny(SPECS / "relation.yaml"))
    generate(spec, tmp_path / "ds")
    assert load_spec(tmp_path / "ds").fingerprint() == spec.fingerprint()
    assert load_spec(tmp_path / "ds" / "manifest.json").fingerprint() == spec.fingerprint()
    r = runner.invoke(app, ["validate", str(tmp_path)])
    assert r.exit_code == 2 and "without manifest.json" in r.output


def test_sample_sheet_captions_reads_in_the_intended_order_and_names_unreadable(tmp_path, monkeypatch):
    import json

    import numpy as np

    import mosaic.preview as pv

    (tmp_path / "images").mkdir()
    recs = [{"file_name": f"images/{i}.png", "concepts": {"color": "red", "shape": "circle"}, "held_out": i == 0,
             "combination": [str(i)]} for i in range(2)]
    for r in recs:
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / r["file_name"])
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    got = {}
    monkeypatch.setattr(pv, "contact_sheet", lambda images, caps, out, tile: got.setdefault("caps", caps))
    pv.sample_sheet(tmp_path, tmp_path / "s.png", predictions=[{"shape": "square", "color": "red"}, {"shape": None, "color": None}])
    assert got["caps"] == ["HELD-OUT red circle | read: red square", "seen red circle | read: unreadable"]


def test_piped_output_is_wide_enough_for_the_tables(monkeypatch):
    """Written to a pipe or a file (a sweep's log, `| tee`) without COLUMNS, rich would take 80
    columns and wrap the tables' cells; a terminal and an explicit COLUMNS keep their width."""
    import io

    from mosaic.cli.common import PIPE_WIDTH, _width

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    assert _width(io.StringIO()) == PIPE_WIDTH
    assert _width(Tty()) is None
    assert _width(object()) == PIPE_WIDTH  # a stream without isatty
    monkeypatch.setenv("COLUMNS", "100")
    assert _width(io.StringIO()) is None  # rich reads COLUMNS itself


def test_help_shows_no_value_type_after_a_flag_and_keeps_it_for_options_that_take_one():
    r = runner.invoke(app, ["verify", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--repair" in r.output and "--quick" in r.output
    assert "<bool>" not in r.output  # `--repair <bool>` read as "give a value", and `--repair true` is an error
    r = runner.invoke(app, ["train", "diffusion", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--dry-run" in r.output and "<bool>" not in r.output
    assert "<list[str]>" in r.output or "<path>" in r.output  # an option that takes a value still shows its type


def test_command_help_is_reflowed_paragraphs():
    """Help text is the docstring with each paragraph's hard line breaks joined (rich printed them
    as given, breaking sentences mid-line in `mosaic --help`)."""
    from mosaic.cli import _reflow, app

    assert _reflow("One line\n    goes on.\n\n    Second paragraph\n    here.") == "One line goes on.\n\nSecond paragraph here."
    helps = {info.name or info.callback.__name__: info.help for info in app.registered_commands}
    assert "\n" not in helps["validate"].split("\n\n")[0] and "lays out 256" in helps["validate"]
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands:
            assert info.help and all("\n" not in p for p in info.help.split("\n\n"))
