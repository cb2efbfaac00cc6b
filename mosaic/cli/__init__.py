"""The ``mosaic`` command line (typer + rich): ``app``, the console-script entry point.

Every command group lives in its own module and is registered here, explicitly, in the order
``mosaic --help`` lists them:

- :mod:`mosaic.cli.data` — ``validate``, ``generate``, ``preview``
- :mod:`mosaic.cli.export` — ``export``
- :mod:`mosaic.cli.verify` — ``verify``
- :mod:`mosaic.cli.splits` — ``splits``
- :mod:`mosaic.cli.evaluate` — ``evaluator check|train``, ``evaluate``
- :mod:`mosaic.cli.train` — ``train diffusion|transformer``, ``sample``
- :mod:`mosaic.cli.autoencoder` — ``autoencoder train|check`` (latent diffusion's autoencoder)
- :mod:`mosaic.cli.sweep` — ``sweep``, ``report``
- :mod:`mosaic.cli.analyze` — ``analyze`` (representation diagnostics of a finished run)
- :mod:`mosaic.cli.audit` — ``audit``, ``evaluator calibrate``
- :mod:`mosaic.cli.reproduce` — ``reproduce``
- :mod:`mosaic.cli.schema` — ``schema`` (the JSON Schema of a file kind)

What they share (consoles, the exit-2 failure, option types) is in :mod:`mosaic.cli.common`.
Command modules import only typer and rich at the top; numpy, torch and the rest of mosaic are
imported inside the commands, so ``mosaic --help`` starts fast.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from mosaic.cli import analyze, audit, autoencoder, data, evaluate, export, reproduce, schema, splits, sweep, train, verify
from mosaic.cli.common import fail, hide_flag_types
from mosaic.errors import MosaicError

hide_flag_types()


def _errnos(*names: str) -> frozenset:
    import errno

    return frozenset(getattr(errno, n) for n in names if hasattr(errno, n))


#: errors of the file system or the device under it (a failing disk, a network mount gone stale, no permission, too
#: many open files): whichever reader or writer met one, it is named with the path and errno, never a traceback
_IO_ERRNOS = _errnos("EIO", "ESTALE", "EREMOTEIO", "ENXIO", "ENODEV", "ENOMEDIUM", "EMEDIUMTYPE", "ENOTCONN", "ETIMEDOUT",
                     "EHOSTDOWN", "EHOSTUNREACH", "ENOLINK", "ECOMM", "EACCES", "EPERM", "EROFS", "EMFILE", "ENFILE", "ELOOP",
                     "EBUSY", "ENOTEMPTY", "EXDEV", "ETXTBSY")


def io_failure(e: OSError) -> str:
    """What an OSError of :data:`_IO_ERRNOS` met while reading or writing a file means, and the fix."""
    import errno

    code = errno.errorcode.get(e.errno, str(e.errno))
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make it readable (and its folder writable where mosaic writes), or give another path"
    elif e.errno == errno.ELOOP:  # O_NOFOLLOW met a link where mosaic reads or writes only its own files, or a loop of links
        fix = ("it is a symbolic link (or a loop of them) where mosaic opens only a file of its own: replace the link with the "
               "file itself, or remove it, then rerun")
    elif e.errno in (errno.EBUSY, errno.ETXTBSY):
        fix = "another program or a mount holds it: stop that program (or give another path), then rerun"
    elif e.errno in (errno.ENOTEMPTY, errno.EXDEV):
        fix = ("another program wrote into it while mosaic replaced it, or it lies on another file system than its folder: "
               "stop that program (or give a path on one file system), then rerun")
    elif e.errno in (errno.EMFILE, errno.ENFILE):
        fix = "close other programs or raise the open-file limit (ulimit -n), then rerun"
    else:
        fix = ("the disk, or the network file system it lies on, failed to read or write it: check the device or remount "
               "the file system (or copy the folder to a healthy disk), then rerun the same command")
    return f"cannot be read or written: {e.strerror or 'I/O error'} (errno {e.errno}, {code}); the command stopped there: {fix}"


class _MosaicGroup(TyperGroup):
    """The top-level group: refuses, before any command sees them, arguments that are never meant:
    an empty or whitespace-only one (``pathlib.Path("")`` is ``.``, so ``mosaic verify "$DIR"`` with
    an unset variable would check, and ``--out ""`` write into, the current folder; ``-o " "`` would
    make a folder named by a space), ``--opt=`` with an empty value, and ``-o=VALUE`` (click reads
    the value of a short option as ``=VALUE``). No option or argument of mosaic takes such a value."""

    def main(self, *args, **kwargs):
        # a path that is not valid UTF-8 (kept as surrogates by Python) must not crash a "done" / "OK" line
        # after the work is finished: such characters are printed as \udcXX escapes instead
        import sys

        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "reconfigure") and getattr(stream, "errors", None) == "strict":
                try:
                    stream.reconfigure(errors="backslashreplace")
                except (ValueError, OSError):  # pragma: no cover - a stream that cannot be reconfigured
                    pass
        return super().main(*args, **kwargs)

    def invoke(self, ctx):
        # a full disk (or quota) is named, never a traceback, whichever command wrote: every writer of mosaic writes
        # through a temporary name that is removed on failure, so a rerun of the same command resumes or starts over
        import errno
        import os

        try:  # every relative path is read from the current folder: one that was deleted is named before any command runs
            os.getcwd()
        except OSError as e:
            fail(MosaicError(f"the current folder no longer exists ({e.strerror}): every relative path is read from it; cd to a "
                             "folder that exists and run the command again"))
        try:
            return super().invoke(ctx)
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:  # a path given (or made from one) with a name over 255 bytes: pathlib's
                # is_dir()/exists() raise it where they return False for a missing file
                fail(MosaicError([(str(e.filename or "a path")[:300], "a name in this path is longer than a file name can be "
                                   "(255 bytes): give a path whose every folder and file name is at most 255 bytes")]))
            if e.errno in _IO_ERRNOS:  # the file system failed a read or write: named with the path and errno
                fail(MosaicError([(str(e.filename or "a file")[:300], io_failure(e))]))
            if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
            where = f" while writing {e.filename}" if e.filename else ""
            fail(MosaicError(f"the disk is full ({e.strerror}){where}: nothing half-written is kept (temporary files are removed); "
                             "free space (or raise the quota), then rerun the same command: it resumes where it stopped"))

    def parse_args(self, ctx, args):
        import re

        for i, a in enumerate(args):
            if a.strip() == "":
                what = f"argument {i + 1}" + (f" (after {args[i - 1]!r})" if i else "") + (" is an empty string" if a == "" else f" is only whitespace ({a!r})")
            elif a.startswith("--") and a.endswith("=") and "=" not in a[:-1]:
                what = f"{a!r} has an empty value"
            elif re.match(r"-[A-Za-z]=", a):
                what = f"{a!r}: a short option takes its value after a space ({a[:2]} VALUE), not after '='"
            else:
                continue

            fail(MosaicError(f"{what}: no mosaic option or argument takes such a value (an unset shell variable?); give the path or value"))
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
app.add_typer(autoencoder.autoencoder_app, name="autoencoder")
app.command("analyze")(analyze.analyze)
app.command("sweep")(sweep.sweep_command)
app.command("report")(sweep.report_command)
app.command("audit")(audit.audit)
app.command("reproduce")(reproduce.reproduce_command)
app.command("schema")(schema.schema)
evaluate.evaluator_app.command("calibrate")(audit.calibrate)


def _reflow(doc: str | None) -> str | None:
    """A command's docstring as help text: paragraphs kept, the hard line breaks inside each joined
    (rich prints help as given, so a docstring wrapped at 110 columns broke mid-sentence)."""
    import inspect

    if not doc:
        return doc
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None:
            info.help = _reflow(info.callback.__doc__)
    for group in typer_app.registered_groups:
        _reflow_help(group.typer_instance)


_reflow_help(app)


def main() -> None:  # pragma: no cover
    app()
