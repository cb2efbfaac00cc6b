"""Errors of the diagnostics: :class:`DiagnosticError`, :class:`NotApplicableError` and
:class:`LeakageError`, all :class:`mosaic.errors.MosaicError` (the CLI prints them without a
traceback and exits with status 2).

Their home is :mod:`mosaic.errors`; this module re-exports them, and defines them itself only
while that module does not have them yet (the error classes were being moved there when the
diagnostics were written).
"""

from __future__ import annotations

try:
    from mosaic.errors import DiagnosticError, LeakageError, NotApplicableError
except ImportError:  # an older mosaic.errors without the diagnostics' classes
    from mosaic.errors import MosaicError

    class DiagnosticError(MosaicError, ValueError):  # type: ignore[no-redef]
        """A diagnostic asked for on inputs it cannot use (wrong shapes, too few samples, ...).
        The message names the diagnostic, the offending argument and value, and a fix."""

    class NotApplicableError(DiagnosticError):  # type: ignore[no-redef]
        """A diagnostic that does not apply to the run or the data, e.g. rank axes without an
        ordinal concept, or the diffusion classifier on a transformer run. ``diagnostic`` names
        it and ``reason`` says why."""

        def __init__(self, diagnostic: str, reason: str, fix: str | None = None):
            self.diagnostic, self.reason, self.fix = diagnostic, reason, fix
            msg = f"diagnostic {diagnostic!r} does not apply: {reason}"
            super().__init__(msg + (f"; {fix}" if fix else ""))

    class LeakageError(DiagnosticError):  # type: ignore[no-redef]
        """A probe or axis asked to train on held-out combinations (test_ood cells): diagnostics
        train on seen combinations only, so that held-out accuracy measures generalization."""



def refuse_held_out(n: int, held_out, what: str, noun: str, why: str) -> None:
    """The one leakage check of the diagnostics: raise unless ``held_out`` (bool ``[n]``, a numpy
    array, list or torch tensor, or None) flags no sample.

    Raises:
        DiagnosticError: ``held_out`` does not have ``n`` flags ("{what}: held_out has K flags for n {noun}").
        LeakageError: a sample is flagged ("{what}: k of n {noun} {why}").
    """
    if held_out is None:
        return
    import numpy as np

    h = np.asarray(held_out.detach().cpu().numpy() if hasattr(held_out, "detach") else held_out, dtype=bool).reshape(-1)
    if len(h) != n:
        raise DiagnosticError(f"{what}: held_out has {len(h)} flags for {n} {noun}")
    if h.any():
        raise LeakageError(f"{what}: {int(h.sum())} of {len(h)} {noun} {why}")


__all__ = ["DiagnosticError", "LeakageError", "NotApplicableError", "refuse_held_out"]
