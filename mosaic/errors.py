"""Error types. Every message names the spec field, the offending value and a fix."""

from __future__ import annotations


class MosaicError(Exception):
    """Base class of mosaic's user-facing errors (the CLI prints them without a traceback)."""


class SpecError(MosaicError, ValueError):
    """A spec file that cannot be read or validated.

    ``problems`` is a list of ``(field path, message)`` pairs; ``str()`` lists them one per line.
    """

    def __init__(self, problems: list[tuple[str, str]] | str, source: str | None = None):
        if isinstance(problems, str):
            problems = [("", problems)]
        self.problems = problems
        self.source = source
        head = f"invalid spec {source}" if source else "invalid spec"
        lines = [f"  {path}: {msg}" if path else f"  {msg}" for path, msg in problems]
        super().__init__(head + "\n" + "\n".join(lines))


class LayoutError(MosaicError, RuntimeError):
    """The bounded layout search could not place a scene's objects."""


class DatasetError(MosaicError, RuntimeError):
    """A dataset directory that cannot be written or read as asked."""
