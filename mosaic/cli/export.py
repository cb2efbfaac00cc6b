"""``mosaic export``: convert a generated dataset between imagefolder and sharded Parquet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from mosaic.cli.common import MAX_SHARD_MB, finite_float, check_out, console, err_console, fail, lazy_progress
from mosaic.errors import MosaicError


def export_command(
    src: Annotated[Path, typer.Argument(help="A complete mosaic dataset directory (imagefolder or parquet)")],
    format: Annotated[str, typer.Option("--format", "-f", help="Form to write: parquet or imagefolder")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Output directory (default: SRC-FORMAT beside SRC)")] = None,
    shard_mb: Annotated[float, typer.Option("--shard-mb", parser=finite_float(0.001, MAX_SHARD_MB), help="Target Parquet shard size in MiB")] = 256.0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing mosaic dataset at --out")] = False,
) -> None:
    """Convert a dataset between imagefolder and Parquet: the same PNG bytes and labels, a new
    manifest, leak check and dataset card. The source is only read."""
    try:
        from mosaic.export import export
        from mosaic.parquet import check_format

        check_format(format)
        check_out(out, dataset=True)  # the dataset itself, not a folder inside another
        t0 = time.perf_counter()
        with lazy_progress(f"[bold]export[/] {escape(src.name)} -> {escape(format)}") as update:
            man = export(src, format, out, shard_bytes=int(shard_mb * 2**20), overwrite=overwrite, on_progress=update)
        dt = time.perf_counter() - t0
    except MosaicError as e:
        fail(e)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: the output is incomplete; rerun with --overwrite")
        raise typer.Exit(130)
    dst = out if out is not None else src.with_name(f"{src.name}-{format}")
    counts = ", ".join(f"{k} {v['count']}" for k, v in man["splits"].items())
    console.print(f"[green]done[/] {dst}  ({format}; {counts}; {dt:.1f} s; leak check {'passed' if man['leak_check']['passed'] else 'FAILED'})")
