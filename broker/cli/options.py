"""What every client-side command of the ``viewstream`` CLI shares: where it connects,
its credentials, and how it prints a result or a failure.

Purpose: one definition of ``--address``, ``--username``, ``--password`` and ``--token``
(with their environment variables) and of the run-print-exit wrapper, for the commands
in :mod:`broker.cli` and :mod:`broker.cli.resources`.

Invariants:

1. A command logs in with a personal access token when one is given (``--token`` or
   ``VIEWSTREAM_TOKEN``), else with the username and password; the password is prompted
   for (hidden) only when neither a token nor a password was given.
1a. ``--address`` is ``HOST:PORT`` or a connection string in Iggy's form
   (``iggy+tcp://user:pass@host:port?tls=true&tls_domain=...&tls_ca_file=...``, or
   ``iggy://TOKEN@host:port...``): the command talks to its first node, over TLS when
   the string says so, with the string's credentials, which take the place of
   ``--username``, ``--password`` and ``--token``. A string that does not parse is a bad
   argument.
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
    from broker.cli.admin import Target, Tls

DEFAULT_SERVER: Final = "127.0.0.1:8090"
PINGS_MAX: Final = 1000
"""Most pings one ``viewstream ping --count`` sends."""

AddressOption = Annotated[
    str,
    typer.Option(
        "--address",
        envvar="VIEWSTREAM_SERVER",
        help="The node to talk to: HOST:PORT, or a connection string "
        "(iggy+tcp://user:pass@host:port?tls=true&tls_domain=...&tls_ca_file=..., "
        "iggy://TOKEN@host:port...) whose credentials replace the options'.",
    ),
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


def endpoint(address: str) -> tuple[str, Tls | None, Target | None]:
    """``--address`` read (invariant 1a): the node's ``HOST:PORT``, TLS if asked, and,
    for a connection string, the target it names with its credentials.

    Raises:
        typer.BadParameter: a connection string that does not parse.
    """
    from broker.cli.admin import Target, Tls
    from sdk.connection_string import parse_connection_string
    from sdk.errors import InvalidConnectionString

    if "://" not in address:
        return address, None, None
    try:
        config = parse_connection_string(address)
    except InvalidConnectionString as error:
        raise typer.BadParameter(str(error), param_hint="--address") from None
    node = str(config.seeds[0])
    tls = Tls(config.tls_domain, config.tls_ca_file) if config.tls else None
    if config.token is not None:
        return node, tls, Target(node, "", "", token=config.token, tls=tls)
    assert config.username is not None and config.password is not None
    return node, tls, Target(node, config.username, config.password, tls=tls)


def target(address: str, username: str, password: str | None, token: str | None) -> Target:
    """Where and as whom to connect (invariants 1 and 1a)."""
    from broker.cli.admin import Target

    node, tls, named = endpoint(address)
    if named is not None:
        return named
    if token is not None:
        return Target(node, username, "", token=token, tls=tls)
    if password is None:
        password = typer.prompt(f"password for {username}", hide_input=True)
    return Target(node, username, password, tls=tls)


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
