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
