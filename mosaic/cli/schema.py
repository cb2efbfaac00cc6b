"""``mosaic schema {spec,config,sweep}``: the JSON Schema of a file kind, from the pydantic models
(:mod:`mosaic.file_schemas`), for editors that complete and check YAML as it is typed."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mosaic.cli.common import check_out, console, fail
from mosaic.errors import MosaicError


class Kind(str, Enum):
    spec = "spec"
    config = "config"
    sweep = "sweep"


def schema(
    kind: Annotated[Kind, typer.Argument(help="File kind: spec (mosaic generate), config (mosaic train diffusion|transformer) "
                                              "or sweep (mosaic sweep)", show_default=False)],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the schema to this file (default: print it)")] = None,
) -> None:
    """Print the JSON Schema of a spec, training config or sweep file, generated from the models that
    validate it: point an editor's YAML language server at it for completion and checking as you
    type (the shipped files in docs/schemas/ are this output)."""
    try:
        check_out(out, kind="file")
        from mosaic.file_schemas import dumps

        text = dumps(kind.value)
        if out is None:
            typer.echo(text, nl=False)
            return
        from mosaic.io import atomic_write

        atomic_write(out, text)
        console.print(f"wrote {out}", highlight=False)
    except (MosaicError, OSError) as e:
        fail(e if isinstance(e, MosaicError) else MosaicError(f"--out: cannot write {str(out)!r}: {e.strerror or e}"))
