"""The handbook's references are generated from the code (docs/hooks/reference.py), so a field or a
command added to the code appears in the docs without a hand edit; hand-written tables name only
fields that exist; a broken link or a missing page fails `mkdocs build --strict`."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal, Optional

import pytest
import typer
from pydantic import Field, create_model

from mosaic.lab.diffusion import DiffusionConfig
from mosaic.lab.transformer import TransformerConfig
from mosaic.schema import StrictModel
from mosaic.spec import Spec
from mosaic.sweep import SweepSpec

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ref = _load("reference")


def _row(rows, path):
    return next((r for r in rows if r["path"] == path), None)


def test_a_field_added_to_a_model_appears_in_its_generated_reference():
    """What the issue asks: no hand edit between a new field and its documentation."""
    before = ref.fields_markdown(Spec)
    assert "`image.size`" in before and "`holdout.rule.n`" in before
    assert "wobble" not in before
    Wobble = create_model("Wobble", __base__=StrictModel, __doc__="How scenes wobble.",
                          amplitude=(float, Field(0.25, ge=0, le=2, description="wobble amplitude, fraction of the side")),
                          mode=(Literal["sine", "noise"], "sine"))
    Extended = create_model("ExtendedSpec", __base__=Spec, wobble=(Optional[Wobble], Field(None, description="a new section")),
                            jitter_px=(int, Field(3, ge=0, le=64, description="a new top-level field")))
    rows = ref.field_rows(Extended)
    r = _row(rows, "jitter_px")
    assert r == {"path": "jitter_px", "type": "int", "default": "3", "bounds": "≥ 0, ≤ 64", "description": "a new top-level field"}
    r = _row(rows, "wobble.amplitude")
    assert r["type"] == "float" and r["default"] == "0.25" and r["bounds"] == "≥ 0, ≤ 2"
    assert r["description"] == "wobble amplitude, fraction of the side"
    assert _row(rows, "wobble.mode")["type"] == '"sine" or "noise"'
    md = ref.fields_markdown(Extended)
    assert "| `jitter_px` | int | `3` | ≥ 0, ≤ 64 | a new top-level field |" in md
    assert "`wobble.amplitude`" in md
    # and through the page marker the docs build expands
    page = ref.expand("# x\n\n<!-- mosaic:fields tests.test_docs:_EXTENDED -->\n")
    assert "| `retries` | int | `0` | ≥ 0, ≤ 9 | retries per trial |" in page and "<!--" not in page


_EXTENDED = create_model("ExtendedSweep", __base__=SweepSpec, retries=(int, Field(0, ge=0, le=9, description="retries per trial")))


def test_the_generated_references_cover_every_model_field():
    for model in (Spec, DiffusionConfig, TransformerConfig, SweepSpec):
        paths = {r["path"] for r in ref.field_rows(model)}
        for name in model.model_fields:
            assert name in paths
    rows = ref.field_rows(DiffusionConfig)
    r = _row(rows, "training.steps")
    assert r["default"] == str(DiffusionConfig.model_fields["training"].default_factory().steps)
    assert r["bounds"].startswith("≥ 1")
    rows = ref.field_rows(Spec)
    # nested lists and mappings of models, and the variants of the holdout rule union by their tag
    assert _row(rows, "objects.<i>.shape") and _row(rows, "concepts.<name>.values")
    assert "(when kind: diagonal)" in _row(rows, "holdout.rule.n")["description"]
    md = ref.fields_markdown(Spec)
    assert "<root>" not in md.replace("`", "")  # an HTML-looking description is escaped


def test_the_cli_reference_lists_every_command_and_a_new_one_appears():
    text = ref.cli_markdown()
    paths = ref.command_paths()
    assert {"mosaic generate", "mosaic train diffusion", "mosaic evaluator check", "mosaic schema"} <= set(paths)
    for p in paths:
        assert f"`{p}`" in text
    assert "--shard-mb" in text and "int (1 ≤ x ≤ 1024)" in text  # option, type and range from the command tree
    demo = typer.Typer()

    @demo.command("alpha")
    def alpha(count: int = typer.Option(3, "--count", min=1, max=9, help="how many")):
        """Say alpha."""

    @demo.command("beta")
    def beta():
        """Say beta."""

    text = ref.cli_markdown(demo, prog="demo")
    assert "`demo alpha`" in text and "`demo beta`" in text and "Say alpha." in text
    assert "| `--count` | option | int (1 ≤ x ≤ 9) | `3` | how many |" in text


def test_an_unknown_marker_or_model_is_an_error_not_a_silent_gap():
    with pytest.raises(ValueError, match="does not import"):
        ref.expand("<!-- mosaic:fields mosaic.spec:NoSuchModel -->\n")
    with pytest.raises(ValueError, match="unknown marker"):
        ref.expand("<!-- mosaic:tables -->\n")


HAND_TABLES = {"docs/spec.md": Spec, "docs/training-diffusion.md": DiffusionConfig, "docs/training-transformers.md": TransformerConfig}


@pytest.mark.parametrize("page", sorted(HAND_TABLES))
def test_hand_written_field_tables_name_only_fields_that_exist(page):
    """The guide pages keep a short 'what it means' table; the names in it must be real fields
    (a renamed or removed field fails here), the defaults live in the generated reference."""
    model = HAND_TABLES[page]
    paths = {r["path"] for r in ref.field_rows(model)}
    text = (ROOT / page).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    in_tables = False
    checked = 0
    for line in text.splitlines():
        if line.startswith("| field | meaning |"):
            in_tables = True
            continue
        if in_tables and not line.startswith("|"):
            in_tables = False
        if not in_tables or not line.startswith("| `"):
            continue
        first = re.split(r"(?<!\\)\|", line)[1]
        names = re.findall(r"`([^`]+)`", first)
        base = names[0].rsplit(".", 1)[0] + "." if "." in names[0] else ""
        for n in names:
            full = n if ("." in n or not base) else base + n
            if full.endswith(".*"):
                assert any(p.startswith(full[:-1]) for p in paths), f"{page}: {full} matches no field"
            else:
                assert full in paths, f"{page}: `{n}` ({full}) is not a field of {model.__name__}"
            checked += 1
    assert rows and checked >= 5


@pytest.mark.skipif(shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs not installed (pip install -e '.[docs]')")
def test_a_broken_link_or_a_page_outside_the_nav_fails_the_strict_build(tmp_path):
    """The site's own validation settings, on a two-page site: a link to a missing page, a missing
    anchor and a page left out of the nav each fail `mkdocs build --strict`."""
    import yaml

    cfg_text = (ROOT / "mkdocs.yml").read_text()
    validation = cfg_text[cfg_text.index("\nvalidation:") + 1:cfg_text.index("\nnav:") + 1]
    assert yaml.safe_load(validation)["validation"]["links"]["not_found"] == "warn"

    def build(pages: dict, nav: str) -> subprocess.CompletedProcess:
        site = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        (site / "docs").mkdir(parents=True)
        for name, body in pages.items():
            (site / "docs" / name).write_text(body)
        (site / "mkdocs.yml").write_text(f"site_name: t\nstrict: true\n{validation}nav:\n{nav}")
        # not -q: it hides the warnings that --strict counts, and the build passes
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=site, capture_output=True, text=True)

    nav = "  - index.md\n  - b.md\n"
    assert build({"index.md": "# a\n\n[b](b.md#b)\n", "b.md": "# b\n"}, nav).returncode == 0
    r = build({"index.md": "# a\n\n[b](missing.md)\n", "b.md": "# b\n"}, nav)
    assert r.returncode != 0 and "missing.md" in r.stderr + r.stdout
    r = build({"index.md": "# a\n\n[b](b.md#nowhere)\n", "b.md": "# b\n"}, nav)
    assert r.returncode != 0 and "nowhere" in r.stderr + r.stdout
    r = build({"index.md": "# a\n", "b.md": "# b\n", "c.md": "# c\n"}, nav)
    assert r.returncode != 0 and "c.md" in r.stderr + r.stdout


def test_every_docs_page_is_in_the_nav_and_the_nav_has_no_missing_page():
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:"):]
    listed = set(re.findall(r":\s*([\w./-]+\.(?:md|ipynb))\s*$", nav, re.M))
    docs = ROOT / "docs"
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.suffix in (".md", ".ipynb")
             and "hooks" not in p.parts and ".ipynb_checkpoints" not in p.parts}
    assert pages - listed == set(), f"pages not in mkdocs.yml nav: {sorted(pages - listed)}"
    assert listed - pages == set(), f"nav names missing pages: {sorted(listed - pages)}"


def test_rest_roles_in_rendered_docstrings_become_plain_code():
    html = "raise :class:<code>~mosaic.errors.SpecError</code>, see :func:<code>load_spec</code>"
    assert ref.on_page_content(html, None, None, None) == "raise <code>mosaic.errors.SpecError</code>, see <code>load_spec</code>"
