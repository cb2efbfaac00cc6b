"""``mosaic verify DIR``: check a generated dataset (either storage form) against its manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mosaic.cli.common import console, err_console, fail, lazy_progress, shown
from mosaic.errors import MosaicError


def verify(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder (made by `mosaic generate`)")],
    quick: Annotated[bool, typer.Option("--quick", help="No digests: what a rerun of `mosaic generate` checks. Imagefolder: counts, metadata lines and their names, each PNG's presence, size and form. Parquet: each shard's size, footer, row count and schema; no row is read (the full check and every reader check rows)")] = False,
    repair: Annotated[bool, typer.Option("--repair", help="Regenerate the damaged samples (byte-identical) after the check")] = False,
    max_lines: Annotated[int, typer.Option("--max-lines", min=1, help="Damaged files listed at most")] = 50,
    against_spec: Annotated[bool, typer.Option("--against-spec", help="Also make every sample again from the manifest's spec and compare (records, images, masks, shards): finds files rewritten together with their digests. Costs about one generation of the dataset with one process")] = False,
) -> None:
    """Check every file of a dataset against the digests its manifest records: reports each missing,
    truncated, undecodable or altered file and each metadata line that does not match. Exit status 0
    when whole, 1 when damaged (fix it with --repair or by rerunning `mosaic generate`), 2 for bad input."""
    from mosaic.against_spec import NOT_SPEC, regenerate_command
    from mosaic.dataset import repair_dataset, sample_record
    from mosaic.verify import read_manifest_checked
    from mosaic.verify import verify as do_verify

    man = None
    try:
        report = do_verify(dataset, deep=not quick, sample_fn=sample_record)
        if against_spec:
            man = read_manifest_checked(dataset)
            report = _against_spec(dataset, man, report)
        if repair and not report.ok and not any(d.problem == NOT_SPEC for d in report.damage):  # --repair trusts the digests
            after = repair_dataset(dataset, report)
            if after.ok:
                console.print(f"[green]repaired[/] {dataset}: {len(report.damage)} damaged file(s) or line(s) regenerated, byte-identical")
                return
            report = after
    except MosaicError as e:
        fail(e)
    kind = ("quick" if quick else "full") + (", against the spec" if against_spec else "")
    if report.ok:
        console.print(f"[green]OK[/] {dataset} ({report.storage}, {report.files} files, {kind} check)")
        return
    err_console.print(f"[bold red]damaged[/] {escape(str(dataset))} ({report.storage}, {len(report.damage)} problem(s), {kind} check):")
    for d in report.damage[:max_lines]:
        err_console.print(f"  {shown(d.path)}: {d.problem}: {shown(d.detail)}", highlight=False)
    if len(report.damage) > max_lines:
        err_console.print(f"  ... and {len(report.damage) - max_lines} more")
    from mosaic.verify import fix_of

    if man is not None and any(d.problem == NOT_SPEC for d in report.damage):
        fix = (f"files differ from what the spec makes although their digests may match: they were rewritten after generation, and "
               f"--repair (which trusts the digests) cannot tell; regenerate the dataset from its own spec with "
               f"`{regenerate_command(dataset, man)}`, or restore it from a copy")
    else:
        fix = fix_of(report, dataset)  # the one fix line, shared with every reader's refusal
    err_console.print(f"fix: {shown(fix)}", highlight=False)
    raise typer.Exit(1)


def _against_spec(dataset: Path, man: dict, report):
    """``report`` with every sample made again from the manifest ``man``'s spec and compared, under a progress bar."""
    from mosaic.against_spec import against_spec

    with lazy_progress("[bold]against the spec[/]") as tick:
        return against_spec(dataset, man, report, on_progress=tick)
