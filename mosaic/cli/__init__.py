"""The ``mosaic`` command line (typer + rich): ``app``, the console-script entry point.

Every command group lives in its own module and is registered here, explicitly, in the order
``mosaic --help`` lists them:

- :mod:`mosaic.cli.data` — ``validate``, ``generate``, ``preview``
- :mod:`mosaic.cli.export` — ``export``
- :mod:`mosaic.cli.verify` — ``verify``
- :mod:`mosaic.cli.splits` — ``splits``
- :mod:`mosaic.cli.evaluate` — ``evaluator check|train``, ``evaluate``
- :mod:`mosaic.cli.train` — ``train diffusion|transformer``, ``sample``
- :mod:`mosaic.cli.sweep` — ``sweep``, ``report``
- :mod:`mosaic.cli.analyze` — ``analyze`` (representation diagnostics of a finished run)
- :mod:`mosaic.cli.audit` — ``audit``, ``evaluator calibrate``
- :mod:`mosaic.cli.reproduce` — ``reproduce``

What they share (consoles, the exit-2 failure, option types) is in :mod:`mosaic.cli.common`.
Command modules import only typer and rich at the top; numpy, torch and the rest of mosaic are
imported inside the commands, so ``mosaic --help`` starts fast.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from mosaic.cli import analyze, audit, data, evaluate, export, reproduce, splits, sweep, train, verify
from mosaic.cli.common import fail


class _MosaicGroup(TyperGroup):
    """The top-level group: refuses an empty argument before any command sees it. ``pathlib.Path("")``
    is ``.``, so ``mosaic verify "$DIR"`` with an unset variable would otherwise check (or
    ``--out ""`` write into) the current folder; no option or argument of mosaic takes an empty value."""

    def parse_args(self, ctx, args):
        empty = [i for i, a in enumerate(args) if a == "" or (a.startswith("--") and a.endswith("=") and "=" not in a[:-1])]
        if empty:
            from mosaic.errors import MosaicError

            i = empty[0]
            where = f"{args[i]!r} has an empty value" if args[i] else f"argument {i + 1}" + (f" (after {args[i - 1]!r})" if i else "") + " is an empty string"
            fail(MosaicError(f"{where}: no mosaic option or argument takes an "
                             "empty value (an unset shell variable?); give the path or value"))
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_MosaicGroup, no_args_is_help=True, add_completion=False,
                  help="mosaic: controlled datasets and a training lab for compositional generalization.")

app.command("validate")(data.validate)
app.command("generate")(data.generate)
app.command("preview")(data.preview)
app.command("export")(export.export_command)
app.command("verify")(verify.verify)
app.command("splits")(splits.splits)
app.add_typer(evaluate.evaluator_app, name="evaluator")
app.command("evaluate")(evaluate.evaluate)
app.add_typer(train.train_app, name="train")
app.command("sample")(train.sample)
app.command("analyze")(analyze.analyze)
app.command("sweep")(sweep.sweep_command)
app.command("report")(sweep.report_command)
app.command("audit")(audit.audit)
app.command("reproduce")(reproduce.reproduce_command)
evaluate.evaluator_app.command("calibrate")(audit.calibrate)


def main() -> None:  # pragma: no cover
    app()
