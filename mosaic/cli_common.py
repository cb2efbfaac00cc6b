"""What every command group of the CLI shares: the error console and the clean failure exit."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


def fail(e: Exception) -> None:
    """Print a user-facing error (no traceback) and exit with status 2. The message is printed
    literally: brackets such as ``{name: [r, g, b]}`` are not read as rich markup."""
    err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)
