"""The README's test command is what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = next(line for line in ci.splitlines() if "pytest" in line)
    assert cmd in readme


def test_every_cli_command_is_documented():
    from mosaic.cli import app

    readme = (ROOT / "README.md").read_text()
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    names += [g.name for g in app.registered_groups]
    for n in names:
        assert f"mosaic {n}" in readme, f"README does not document `mosaic {n}`"


def test_every_section_the_readme_and_design_point_to_is_there():
    """A slice to the wrong heading once cut 965 lines of the README; the sections newcomers are sent
    to (and the options each feature documents) must all be present."""
    readme = (ROOT / "README.md").read_text()
    heads = [line[3:].strip() for line in readme.splitlines() if line.startswith("## ")]
    for h in ("Quick start", "Command line", "The spec", "Dataset format", "Faults and recovery", "Evaluation", "Training lab",
              "Transformer lab", "Diagnostics", "Sweeps", "Findings", "GPU runs", "Layout", "Benchmarks"):
        assert h in heads, f"README lost its section {h!r}"
    for option in ("binding_complexity:", "interventions:", "report.claims", "--shard-mb", "dataset.stream"):
        assert option in readme, f"README no longer documents {option}"
