"""Every error class of mosaic, on one base that carries a list of problems.

A :class:`MosaicError` holds ``problems``, a list of ``(field path, message)`` pairs (the path is
``""`` when the problem belongs to no field), and an optional ``source`` (the file or dataset the
problems were found in). Each path, message and source is kept to :data:`MAX_PROBLEM_CHARS`
(elided in the middle, :func:`clip`). The CLI prints any MosaicError without a traceback and exits with status
2. Every message names the field, the offending value and a fix.

``str()``: a plain error raised with one message is that message. An error class with a
``heading`` (:class:`SpecError`: ``invalid spec``, :class:`ConfigError`: ``invalid config``)
starts with ``<heading> <source>`` and lists the problems below it, one per line, indented.
"""

from __future__ import annotations

from typing import ClassVar

Problem = tuple[str, str]

#: The most characters of one problem's field path or message that an error keeps: a value echoed
#: back from a hostile or mistaken input (a 60 KB string in a spec, a pasted file) is elided in the
#: middle, so an error stays readable and bounded wherever it is printed or stored.
MAX_PROBLEM_CHARS = 2000


def clip(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its first three quarters and last
    eighth of ``limit`` around ``… [N characters left out] …``."""
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 8
    return f"{text[:head]} … [{len(text) - head - tail} characters left out] … {text[-tail:]}"


class MosaicError(Exception):
    """Base class of mosaic's user-facing errors.

    Args:
        problems: one message, or a list of ``(field path, message)`` pairs.
        source: where the problems were found (a file, a dataset), or None.

    Attributes:
        problems: ``list[tuple[str, str]]``, every problem found.
        source: ``str | None``.
    """

    #: First line of ``str()`` (followed by the source); None: the problems alone.
    heading: ClassVar[str | None] = None

    def __init__(self, problems: list[Problem] | str = "", source: str | None = None):
        if isinstance(problems, str):
            problems = [("", problems)]
        self.problems: list[Problem] = [(clip(str(path)) if path else "", clip(str(msg))) for path, msg in problems]
        self.source = clip(str(source)) if source is not None else None
        super().__init__(self._render())

    def _render(self) -> str:
        if self.heading is None:
            return "\n".join(f"{path}: {msg}" if path else msg for path, msg in self.problems)
        head = f"{self.heading} {self.source}" if self.source else self.heading
        return head + "\n" + "\n".join(f"  {path}: {msg}" if path else f"  {msg}" for path, msg in self.problems)

    def __reduce__(self):  # pickles (worker processes) as it is, whatever a subclass's __init__ takes
        return (_rebuild, (type(self), self.args, self.__dict__.copy()))


def _rebuild(cls: type[MosaicError], args: tuple, state: dict) -> MosaicError:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class SpecError(MosaicError, ValueError):
    """A spec file that cannot be read or validated (:mod:`mosaic.spec`)."""

    heading = "invalid spec"


class ConfigError(MosaicError, ValueError):
    """A lab config that cannot be read or validated (:mod:`mosaic.lab.config`)."""

    heading = "invalid config"


class LayoutError(MosaicError, RuntimeError):
    """The bounded layout search could not place a scene's objects (:mod:`mosaic.sampling`)."""


class DatasetError(MosaicError, RuntimeError):
    """A dataset directory that cannot be written or read as asked (:mod:`mosaic.dataset`)."""


class TrainingError(MosaicError, RuntimeError):
    """Training stopped (non-finite loss, a run folder that cannot be resumed, a changed dataset)."""


class TokenizationError(MosaicError, ValueError):
    """A scene or spec that the symbolic form cannot express (:mod:`mosaic.lab.transformer.tokens`)."""


class SweepError(MosaicError, ValueError):
    """A sweep file that cannot be read or run (:mod:`mosaic.sweep`)."""


class DiagnosticError(MosaicError, ValueError):
    """A diagnostic asked for on inputs it cannot use (wrong shapes, too few samples, ...)
    (:mod:`mosaic.diagnostics`). The message names the diagnostic, the offending argument and
    value, and a fix.
    """


class NotApplicableError(DiagnosticError):
    """A diagnostic that does not apply to the run or the data, e.g. rank axes without an ordinal
    concept, or the diffusion classifier on a transformer run. ``diagnostic`` names it and
    ``reason`` says why."""

    def __init__(self, diagnostic: str, reason: str, fix: str | None = None):
        self.diagnostic, self.reason, self.fix = diagnostic, reason, fix
        msg = f"diagnostic {diagnostic!r} does not apply: {reason}"
        super().__init__(msg + (f"; {fix}" if fix else ""))


class LeakageError(DiagnosticError):
    """A probe or axis asked to train on held-out combinations (test_ood cells): diagnostics train
    on seen combinations only, so that held-out accuracy measures generalization."""
