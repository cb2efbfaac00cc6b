"""Keep the shipped JSON Schemas and the YAML files' schema comments in step with the models.

    python docs/hooks/schemas.py           # write docs/schemas/*.schema.json, add missing comments
    python docs/hooks/schemas.py --check   # exit 1 naming what is stale (what the tests check)

Every YAML file under ``experiments/`` (except the reproduce registry, which no model validates)
starts with one line an editor's YAML language server reads::

    # yaml-language-server: $schema=../../docs/schemas/spec.schema.json

The kind of a file is the kind its folder holds (``specs/`` spec, ``train/`` config, ``sweeps/``
sweep); a file elsewhere is classified by :func:`mosaic.kinds.guess_kind`. Adding the comment
changes nothing else in the file: the line is inserted before the first line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "docs" / "schemas"
PREFIX = "# yaml-language-server: $schema="
FOLDER_KIND = {"specs": "spec", "train": "config", "sweeps": "sweep"}
#: shipped YAML files that no pydantic model validates (and so carry no schema comment)
NOT_SCHEMA_FILES = {"experiments/reproduce.yaml"}


def schema_file(kind: str) -> Path:
    return SCHEMA_DIR / f"{kind}.schema.json"


def shipped_yaml() -> list[Path]:
    """Every shipped YAML file that a schema covers, sorted."""
    files = sorted(p for p in (ROOT / "experiments").rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
    return [p for p in files if p.relative_to(ROOT).as_posix() not in NOT_SCHEMA_FILES]


def kind_of(path: Path) -> str:
    """The file kind of a shipped YAML file (its folder's, else what it looks like)."""
    kind = FOLDER_KIND.get(path.parent.name)
    if kind:
        return kind
    from mosaic.kinds import guess_kind
    from mosaic.overrides import safe_load

    guess = guess_kind(safe_load(path.read_text(encoding="utf-8")))
    mapped = {"spec": "spec", "training config": "config", "sweep": "sweep"}.get(guess or "")
    if mapped is None:
        raise ValueError(f"{path}: not a spec, training config or sweep; add it to NOT_SCHEMA_FILES or move it")
    return mapped


def comment_for(path: Path) -> str:
    """The first line ``path`` must start with."""
    rel = os.path.relpath(schema_file(kind_of(path)), path.parent)
    return PREFIX + Path(rel).as_posix()


def add_comment(path: Path) -> bool:
    """Insert (or correct) the schema comment on the first line; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    want = comment_for(path)
    first, sep, rest = text.partition("\n")
    if first == want:
        return False
    new = (want + "\n" + rest if first.startswith(PREFIX) else want + "\n" + text)
    path.write_text(new, encoding="utf-8")
    return True


def stale() -> list[str]:
    """What is out of step: shipped schemas that differ from ``mosaic schema`` output, YAML files
    without their comment."""
    from mosaic.file_schemas import KINDS, dumps

    out = []
    for kind in KINDS:
        f = schema_file(kind)
        if not f.exists() or f.read_text(encoding="utf-8") != dumps(kind):
            out.append(f"{f.relative_to(ROOT)}: differs from `mosaic schema {kind}`")
    for p in shipped_yaml():
        if p.read_text(encoding="utf-8").partition("\n")[0] != comment_for(p):
            out.append(f"{p.relative_to(ROOT)}: first line is not {comment_for(p)!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report what is stale, change nothing")
    ap.add_argument("--untracked", action="store_true", help="also comment YAML files git does not track yet")
    args = ap.parse_args(argv)
    if args.check:
        problems = stale()
        for p in problems:
            print(p)
        return 1 if problems else 0
    from mosaic.file_schemas import KINDS, dumps

    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        f = schema_file(kind)
        if not f.exists() or f.read_text(encoding="utf-8") != dumps(kind):
            f.write_text(dumps(kind), encoding="utf-8")
            print(f"wrote {f.relative_to(ROOT)}")
    tracked = _tracked()
    for p in shipped_yaml():
        rel = p.relative_to(ROOT).as_posix()
        if tracked is not None and rel not in tracked and not args.untracked:
            print(f"skipped {rel} (not committed yet: someone may be writing it; --untracked includes it)")
            continue
        if add_comment(p):
            print(f"commented {rel}")
    return 0


def _tracked() -> set[str] | None:
    """The files git tracks under experiments/, or None outside a git checkout."""
    import subprocess

    try:
        r = subprocess.run(["git", "ls-files", "experiments"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(r.stdout.split())


if __name__ == "__main__":
    sys.exit(main())
