"""The README keeps what a newcomer needs: the main job, the tests (the command CI runs), a worked
example, every command of the CLI and a link to every page of the docs site; and it stays short."""

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _hook():
    spec = importlib.util.spec_from_file_location("_docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = next(line for line in ci.splitlines() if "pytest" in line)
    assert cmd in README


def test_the_readme_gives_the_main_job_with_its_install_line():
    assert ("pip install -e . && mosaic train diffusion experiments/train/quickstart_cpu.yaml" in README)
    assert (ROOT / "experiments/train/quickstart_cpu.yaml").exists()


def test_every_cli_command_is_listed():
    for path in _hook().command_paths():
        assert f"`{path}" in README, f"README does not list `{path}`"


def test_the_readme_is_short_and_keeps_its_sections():
    """A slice to the wrong heading once cut 965 lines of the README; the sections newcomers are
    sent to must all be present, and the reference lives in docs/, not here."""
    assert len(README.splitlines()) <= 250
    heads = [line[3:].strip() for line in README.splitlines() if line.startswith("## ")]
    for h in ("Quick start", "A worked example", "Commands", "Documentation"):
        assert h in heads, f"README lost its section {h!r}"


def test_the_worked_example_installs_what_it_imports():
    example = README.split("## A worked example", 1)[1].split("\n## ", 1)[0]
    # what the example imports comes with the README's install (`pip install -e .`), or the example installs it
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    for module, dist in (("datasets", "datasets"), ("torch", "torch"), ("pyarrow", "pyarrow")):
        if re.search(rf"\bimport {module}\b|\bfrom {module}\b", example) or (module == "datasets" and "load_dataset" in example):
            extras = [e for e, deps in project.get("optional-dependencies", {}).items() if any(d.startswith(dist) for d in deps)]
            assert dist in base or any(f'pip install -e ".[{e}]"' in example for e in extras), (
                f"the worked example imports {module}, which neither the base install nor an install line of the example brings")


class _MkdocsLoader(yaml.SafeLoader):
    """mkdocs.yml with its tags (``!ENV``, ``!!python/name:``) read as plain values."""


_MkdocsLoader.add_multi_constructor("!", lambda loader, suffix, node: None)
_MkdocsLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _nav_pages(nav):
    for item in nav:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for v in item.values():
                yield from ([v] if isinstance(v, str) else _nav_pages(v))


def test_the_readme_links_every_docs_page_and_every_link_resolves():
    cfg = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_MkdocsLoader)
    links = set(re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README))
    for page in _nav_pages(cfg["nav"]):
        if page == "index.md":
            continue
        assert f"docs/{page}" in links, f"README does not link docs/{page}"
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links a missing file {link}"
