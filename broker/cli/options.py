"""What every client-side command of the ``viewstream`` CLI shares: where it connects,
its credentials, and how it prints a result or a failure.

Purpose: one definition of ``--address``, ``--username``, ``--password`` and ``--token``
(with their environment variables) and of the run-print-exit wrapper, for the commands
in :mod:`broker.cli` and :mod:`broker.cli.resources`.

Invariants:

1. A command logs in with a personal access token when one is given (``--token`` or
   ``VIEWSTREAM_TOKEN``), else with the username and password; the password is prompted
   for (hidden) only when neither a token nor a password was given.
2. A command that fails exits 1 and prints ``<command>: <why>`` on stderr, the server's
   refusals worded by :func:`broker.cli.admin.failure_text`; a bad argument exits 2.

Theory of operation: the options are ``typing.Annotated`` aliases that each command
repeats in its signature, so every command reads its flags as typer expects and
``--help`` lists them; the SDK is imported only when a command runs, so ``viewstream
serve`` never loads the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Final

import typer

if TYPE_CHECKING:
    from broker.cli.admin import Target

DEFAULT_SERVER: Final = "127.0.0.1:8090"
PINGS_MAX: Final = 1000
"""Most pings one ``viewstream ping --count`` sends."""

AddressOption = Annotated[
    str,
    typer.Option("--address", envvar="VIEWSTREAM_SERVER", help="The node to talk to."),
]
UsernameOption = Annotated[
    str, typer.Option("--username", envvar="VIEWSTREAM_USERNAME", help="User to log in as.")
]
PasswordOption = Annotated[
    str | None,
    typer.Option(
        "--password",
        envvar=["VIEWSTREAM_PASSWORD", "VIEWSTREAM_ROOT_PASSWORD"],
        help="Password (prompted for when neither it nor a token is given).",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="VIEWSTREAM_TOKEN",
        help="Log in with this personal access token instead of a password.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="The answer as JSON.")]


def target(address: str, username: str, password: str | None, token: str | None) -> Target:
    """Where and as whom to connect (invariant 1)."""
    from broker.cli.admin import Target

    if token is not None:
        return Target(address, username, "", token=token)
    if password is None:
        password = typer.prompt(f"password for {username}", hide_input=True)
    return Target(address, username, password)


def run_admin(action: str, function: Callable[..., str], *args: object, **kwargs: object) -> None:
    """Run one admin call; print its text, or the failure, and exit non-zero (invariant 2)."""
    from broker.cli.admin import failure_text
    from sdk.errors import IggyError

    try:
        typer.echo(function(*args, **kwargs))
    except IggyError as error:
        typer.echo(f"{action}: {failure_text(error)}", err=True)
        raise typer.Exit(1) from None
    except OSError as error:
        typer.echo(f"{action}: {error}", err=True)
        raise typer.Exit(1) from None
