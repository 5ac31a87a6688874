"""The ``viewstream`` command line."""

from __future__ import annotations

import typer

from broker import __version__

app = typer.Typer(
    name="viewstream",
    help="viewstream: a message-streaming broker replicated with Viewstamped Replication.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"viewstream {__version__}")
        raise typer.Exit


@app.callback()
def main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """viewstream: a message-streaming broker replicated with Viewstamped Replication."""


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"viewstream {__version__}")
