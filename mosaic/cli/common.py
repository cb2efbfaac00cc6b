"""What every command group of the CLI shares: the consoles, the clean failure exit, the option
types and spec loading. Imports nothing heavy (no numpy, torch or spec module at import time)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from mosaic.errors import MosaicError, clip

#: Bounds of the CLI's numeric options (a worker is a process; a shard is written in memory first).
MAX_WORKERS = 1024
MAX_SHARD_MB = 65536.0
MAX_CHECK_N = 1_000_000

#: the width of output written to a file or a pipe (a sweep's log, `| tee`) when COLUMNS is not set: rich
#: would take 80 columns and wrap or cut the tables' cells; a terminal keeps its own width
PIPE_WIDTH = 160
#: the narrowest COLUMNS taken as the terminal's width; below it (or not a number) PIPE_WIDTH is used
MIN_WIDTH = 20


def _width(stream) -> int | None:
    import os

    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    cols = os.environ.get("COLUMNS")
    if cols is not None and not (cols.isascii() and cols.isdigit() and MIN_WIDTH <= int(cols) <= 10_000):
        # COLUMNS=0 printed no error at all (click's usage errors neither), COLUMNS=1 one letter a line (attack
        # round 17): a width no terminal has is dropped for every console, typer's own among them
        del os.environ["COLUMNS"]
        cols = None
    return None if tty or cols else PIPE_WIDTH


#: standard output (tables, progress) and standard error (failures, interruptions)
console = Console(emoji=False, width=_width(sys.stdout))  # ":100:" in a user's value must not become an emoji
err_console = Console(stderr=True, emoji=False, width=_width(sys.stderr))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` as printed literally on a terminal: rich markup escaped, and every control character
    but newline and tab written as ``\\xNN``, so a file name holding an escape sequence (a stray
    ``x\\x1b]0;...`` in a dataset, a name in a record) can neither restyle, retitle nor erase what
    mosaic prints."""
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def fail(e: Exception) -> None:
    """Print a user-facing error (no traceback) and exit with status 2. The message is printed
    literally: brackets such as ``{name: [r, g, b]}`` are not read as rich markup.

    Raises:
        typer.Exit: always, with code 2.
    """
    # any exception's text, bounded line by line (MosaicError clips its own problems already)
    text = "\n".join(clip(line) for line in str(e).split("\n"))
    err_console.print(f"[bold red]error:[/] {shown(text)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def finite_float(lo: float | None = None, hi: float | None = None):
    """A float option parser (``typer.Option(parser=...)``) that refuses ``nan``, ``inf`` and values
    outside ``[lo, hi]`` by name. A plain ``min=``/``max=`` lets ``inf`` through without a max and words
    ``nan`` as "should be less than or equal to ...".

    Raises:
        typer.BadParameter: not a number, not finite, or out of range (click prints it, exit 2).
    """
    import math

    bounds = (f" from {lo:g} to {hi:g}" if lo is not None and hi is not None
              else f" >= {lo:g}" if lo is not None else f" <= {hi:g}" if hi is not None else "")

    def parse(value) -> float:
        text = str(value)
        # plain ASCII decimal notation only: float() would also take '1_000', full-width or Arabic-Indic digits and
        # surrounding whitespace, none of which a user types on purpose
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise typer.BadParameter(f"{value!r} is not a finite number: give a number{bounds}")
        if not _DECIMAL.fullmatch(text):
            raise typer.BadParameter(f"{value!r} is not a number: give a number{bounds} in decimal notation (e.g. 1.5 or 2e-3)")
        number = float(text)
        if not math.isfinite(number):
            raise typer.BadParameter(f"{value!r} overflows to infinity: give a number{bounds}")
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            raise typer.BadParameter(f"{value!r} is out of range: give a number{bounds}")
        return number

    parse.__name__ = "FLOAT"  # the metavar typer shows
    return parse


def set_option(target: str, example: str | None = None):
    """The repeatable ``--set key.path=value`` option type that overrides a field of ``target``
    (a spec, a config, a sweep); ``example`` is shown in the help after ``e.g. --set``."""
    help_ = f"Override a {target} field: key.path=value (repeatable)" + (f", e.g. --set {example}" if example else "")
    return Annotated[Optional[list[str]], typer.Option("--set", help=help_)]


def spec_argument(help_: str = "Spec YAML file, e.g. experiments/specs/count.yaml"):
    """The positional spec-file argument type."""
    return Annotated[Path, typer.Argument(help=help_)]


SpecArg = spec_argument()


def load(spec_path: Path, overrides: list[str] | None):
    """Load and validate a spec with ``--set`` overrides applied (:func:`mosaic.spec.load_spec`).

    Raises:
        mosaic.errors.MosaicError: the file is missing or the spec is invalid.
    """
    from mosaic.spec import load_spec

    return load_spec(spec_path, overrides)


def check_out(path: Path | None, option: str = "--out", kind: str = "folder", dataset: bool = False, run: bool = False) -> None:
    """The one check of a command's output path, before anything is read or written: a ``folder``
    must be (or be creatable as) a writable folder, a ``file`` a regular file in a writable folder
    (:func:`mosaic.io.output_dir_problem`, :func:`mosaic.io.output_file_problem`), neither inside a
    mosaic dataset (``dataset=True``: the command writes a dataset, which may be the folder
    itself), nor a training run's folder (``run=True``: ``mosaic train``, the run itself) or its
    weights (:func:`mosaic.io.output_dir_problem`). None: nothing to check.

    Raises:
        mosaic.errors.MosaicError: naming the option and the value (``/dev/null``, a FIFO, an
            existing file where a folder is wanted, a path under a file, an unwritable place).
    """
    if path is None:
        return
    from mosaic.io import check_output_dir, output_file_problem

    if kind == "folder":
        check_output_dir(path, option, dataset=dataset, run=run)
        return
    problem = output_file_problem(path)
    if problem:
        raise MosaicError([(option, f"{str(path)!r} {problem}: give a file path in a writable folder")])
    if option == "--json" and os.path.lexists(path):
        _refuse_foreign_json(path, option)


def _refuse_foreign_json(path: Path, option: str) -> None:
    """A ``--json`` report is written over an earlier report only (a JSON mapping): the command's own spec
    (``mosaic evaluator check SPEC --json SPEC``) or a person's notes at that path were overwritten, exit 0
    (attack round 20). Raises MosaicError naming the option, the file and the fix."""
    from mosaic.io import read_json

    try:
        data = read_json(path)
    except (OSError, ValueError):  # not a regular file, not UTF-8, not JSON (a YAML spec, notes)
        data = None
    if not isinstance(data, dict) or not any(k in data for k in ("accuracy", "joint_accuracy", "evaluator", "thresholds", "rejected")):
        raise MosaicError([(option, f"{str(path)!r} already holds a file that is not a report of this command (JSON with its "
                                    "accuracies): it is never overwritten; give another path, or move that file away")])


def note_workers(workers: int) -> None:
    """Print the note of a ``--workers`` asking for more processes than the usable CPUs
    (:func:`mosaic.executors.workers_note`; the pools start no more than that)."""
    from mosaic.executors import workers_note

    if note := workers_note(workers):
        console.print(f"[yellow]note[/] {note}", highlight=False)


@contextmanager
def lazy_progress(label: str):
    """A progress bar (bar, done/total, elapsed, remaining) that appears at its first update: a
    command that fails before any work leaves no ``0/?`` bar above its error. Yields
    ``update(done, total)``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=console, transient=False)
    task = None

    def update(done: int, total: int | None) -> None:
        nonlocal task
        if task is None:
            progress.start()
            task = progress.add_task("", total=total)
        progress.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if task is not None:
            progress.stop()


def hide_flag_types() -> None:
    """No ``<bool>`` after a flag in ``--help``: typer 0.29's rich help shows an option's annotation
    as its type even for a flag that takes no value (``--overwrite <bool>``), and a user who then
    types ``--overwrite true`` gets "unexpected extra argument". Flags show no type; every other
    option is unchanged. A no-op where typer has no ``TyperOption.display_type_rich``."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_mosaic_flags_hidden", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and not self.count else shown(self, ctx)

    display_type_rich._mosaic_flags_hidden = True
    TyperOption.display_type_rich = display_type_rich


def resolve_device(device: str, option: str = "--device") -> str:
    """``--device`` as torch reads it: ``auto`` is cuda when there is a CUDA GPU, else cpu; a device
    this machine does not have (``cuda:7``, cuda without a GPU, ``mps`` elsewhere) or no device at all
    (``bogus``) is a MosaicError naming the option and the devices there are (it was an AssertionError
    or RuntimeError traceback from torch)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    have = "cpu" + (f", cuda (cuda:0 ... cuda:{n - 1})" if n else "")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise MosaicError([(option, f"{device!r} is not a device: give auto, or one of this machine's: {have}")]) from None
    if dev.type == "cuda" and (dev.index or 0) >= n or dev.type == "mps" and not torch.backends.mps.is_available() \
            or dev.type not in ("cpu", "cuda", "mps"):
        raise MosaicError([(option, f"{device!r}: this machine has no such device (it has {have}): give auto, or one of them")])
    return device
