"""The ``viewstream`` command line.

Purpose: ``viewstream serve`` runs a node (``broker.runtime``); everything else is a
client-side tool that lives beside this module: ``cluster`` (a local cluster of node
processes, :mod:`broker.cli.cluster`) and the admin commands on the SDK's blocking client
(:mod:`broker.cli.admin`): ``stream``, ``topic``, ``send``, ``poll``, ``cluster status``
and ``stats`` here, the ``iggy`` CLI's resource commands (``user``, ``pat``,
``partition``, ``segment``, ``consumer-group``, ``consumer-offset``, ``client``, ``me``,
``ping``) in :mod:`broker.cli.resources`, their shared options in
:mod:`broker.cli.options`. The server's runtime never imports this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from broker import __version__
from broker.cli.options import (
    DEFAULT_SERVER,
    AddressOption,
    PasswordOption,
    TokenOption,
    UsernameOption,
    run_admin,
    target,
)
from broker.cli.resources import register as register_resources

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


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


@app.command()
def serve(
    address: Annotated[
        str | None,
        typer.Option("--address", help="Client listener HOST:PORT (default 127.0.0.1:8090)."),
    ] = None,
    http_address: Annotated[
        str | None,
        typer.Option(
            "--http-address",
            help="HTTP API listener HOST:PORT (default 127.0.0.1:3000; '' turns it off).",
        ),
    ] = None,
    http_addresses: Annotated[
        str | None,
        typer.Option(
            "--http-addresses",
            help="HTTP HOST:PORT of every node, comma-separated (cluster metadata).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Data directory (default ./local_data).")
    ] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="A TOML config file.")
    ] = None,
    no_sync: Annotated[
        bool,
        typer.Option("--no-sync", help="Never fsync (throwaway runs: a power loss loses data)."),
    ] = False,
    replica: Annotated[
        int | None, typer.Option("--replica", help="This node's replica index.")
    ] = None,
    replicas: Annotated[
        str | None,
        typer.Option("--replicas", help="Replica-bus HOST:PORT of every node, comma-separated."),
    ] = None,
    ws_address: Annotated[
        str | None,
        typer.Option(
            "--ws-address",
            help="WebSocket listener HOST:PORT (default 127.0.0.1:8092); empty: none.",
        ),
    ] = None,
    ws_addresses: Annotated[
        str | None,
        typer.Option(
            "--ws-addresses",
            help="WebSocket HOST:PORT of every node, comma-separated (cluster metadata).",
        ),
    ] = None,
    client_addresses: Annotated[
        str | None,
        typer.Option(
            "--client-addresses",
            help="Client HOST:PORT of every node, comma-separated (advertised to clients).",
        ),
    ] = None,
    cluster_name: Annotated[
        str | None,
        typer.Option("--cluster-name", help="The cluster's name in cluster metadata."),
    ] = None,
    node_names: Annotated[
        str | None,
        typer.Option(
            "--node-names",
            help="Name of every node, comma-separated, in replica order (cluster metadata).",
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option("--node-name", help="This node's name in cluster metadata."),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="debug|info|warning|error")
    ] = None,
) -> None:
    """Run one node in the foreground until Ctrl-C (SIGINT) or SIGTERM.

    With no options: a one-node cluster on 127.0.0.1:8090 with its data in ./local_data.
    The cluster secret and the root password come from the config file or from
    VIEWSTREAM_CLUSTER_SECRET and VIEWSTREAM_ROOT_PASSWORD.
    """
    from broker.runtime.config import ConfigError, load_config
    from broker.runtime.serve import run_node

    try:
        config = load_config(
            address=address,
            http_address=http_address,
            http_addresses=_split(http_addresses),
            data_dir=data_dir,
            config_file=config_file,
            no_sync=True if no_sync else None,
            replica=replica,
            replicas=_split(replicas),
            client_addresses=_split(client_addresses),
            ws_address=ws_address,
            ws_addresses=_split(ws_addresses),
            cluster_name=cluster_name,
            node_names=_split(node_names),
            node_name=node_name,
            log_level=log_level,
        )
    except ConfigError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    run_node(config)


cluster_app = typer.Typer(help="A local cluster on loopback ports.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")

_CLUSTER_DIR = Path("local_cluster")


@cluster_app.command("up")
def cluster_up(
    nodes: Annotated[int, typer.Option("--nodes", help="Nodes: 1, 3 or 5.")] = 3,
    folder: Annotated[
        Path, typer.Option("--dir", help="Folder for data dirs, logs and the roster.")
    ] = _CLUSTER_DIR,
    base_port: Annotated[
        int, typer.Option("--base-port", help="Client port of node 0; node i uses +i.")
    ] = 8090,
    bus_base_port: Annotated[
        int, typer.Option("--bus-base-port", help="Replica-bus port of node 0; node i uses +i.")
    ] = 9090,
    http_base_port: Annotated[
        int, typer.Option("--http-base-port", help="HTTP API port of node 0; node i uses +i.")
    ] = 3000,
    ws_base_port: Annotated[
        int,
        typer.Option("--ws-base-port", help="WebSocket port of node 0; node i uses +i; 0: none."),
    ] = 8190,
    no_sync: Annotated[bool, typer.Option("--no-sync", help="Never fsync.")] = False,
    detach: Annotated[bool, typer.Option("--detach", help="Return once the nodes listen.")] = False,
    bus_tls: Annotated[
        bool,
        typer.Option(
            "--bus-tls",
            help="Run the replica bus over mutual TLS, with a CA and node certificates "
            "made in DIR/bus-tls on the first start.",
        ),
    ] = False,
) -> None:
    """Start a local cluster; Ctrl-C (or `viewstream cluster down`) stops it.

    The root password comes from VIEWSTREAM_ROOT_PASSWORD; otherwise one is generated on
    the first start and printed once.
    """
    from broker.cli.cluster import ClusterLayout
    from broker.cli.cluster import cluster_up as run_up

    if nodes not in (1, 3, 5):
        typer.echo("a cluster has 1, 3 or 5 nodes", err=True)
        raise typer.Exit(2)
    layout = ClusterLayout(
        folder,
        nodes,
        base_port,
        bus_base_port,
        http_base_port=http_base_port,
        ws_base_port=ws_base_port,
        bus_tls=bus_tls,
    )
    raise typer.Exit(run_up(layout, root_password=None, no_sync=no_sync, detach=detach))


@cluster_app.command("down")
def cluster_down(
    folder: Annotated[
        Path, typer.Option("--dir", help="The folder `cluster up` used.")
    ] = _CLUSTER_DIR,
) -> None:
    """Stop the local cluster started from FOLDER (a graceful SIGTERM to each node)."""
    from broker.cli.cluster import cluster_down as run_down

    raise typer.Exit(run_down(folder))


# -- client-side admin commands ---------------------------------------------------------------

stream_app = typer.Typer(help="Create, list and delete streams.", no_args_is_help=True)
topic_app = typer.Typer(help="Create, list and delete topics.", no_args_is_help=True)
app.add_typer(stream_app, name="stream")
app.add_typer(topic_app, name="topic")


@stream_app.command("create")
def stream_create(
    name: str,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Create stream NAME."""
    from broker.cli import admin

    run_admin(
        "stream create", admin.stream_create, target(address, username, password, token), name
    )


@stream_app.command("list")
def stream_list(
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the streams."""
    from broker.cli import admin

    run_admin("stream list", admin.stream_list, target(address, username, password, token))


@stream_app.command("delete")
def stream_delete(
    stream: str,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete STREAM (a name or a numeric id) with its topics and messages."""
    from broker.cli import admin

    run_admin(
        "stream delete", admin.stream_delete, target(address, username, password, token), stream
    )


@topic_app.command("create")
def topic_create(
    stream: str,
    name: str,
    partitions: Annotated[int, typer.Option("--partitions", help="Partition count.")] = 1,
    durability: Annotated[
        str, typer.Option("--durability", help="replicated (default) or persisted.")
    ] = "replicated",
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Create topic NAME in STREAM."""
    from broker.cli import admin

    run_admin(
        "topic create",
        admin.topic_create,
        target(address, username, password, token),
        stream,
        name,
        partitions,
        durability,
    )


@topic_app.command("list")
def topic_list(
    stream: str,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the topics of STREAM."""
    from broker.cli import admin

    run_admin("topic list", admin.topic_list, target(address, username, password, token), stream)


@topic_app.command("delete")
def topic_delete(
    stream: str,
    topic: str,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete TOPIC of STREAM with its messages."""
    from broker.cli import admin

    run_admin(
        "topic delete",
        admin.topic_delete,
        target(address, username, password, token),
        stream,
        topic,
    )


@app.command()
def send(
    stream: str,
    topic: str,
    messages: list[str],
    partition: Annotated[
        int | None, typer.Option("--partition", help="Send to this partition.")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Route by this key (same key, same partition).")
    ] = None,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Send MESSAGES (one batch) to TOPIC of STREAM; balanced over partitions by default."""
    from broker.cli import admin

    run_admin(
        "send",
        admin.send,
        target(address, username, password, token),
        stream,
        topic,
        messages,
        partition=partition,
        key=key,
    )


@app.command()
def poll(
    stream: str,
    topic: str,
    partition: Annotated[int, typer.Option("--partition", help="Partition to read.")] = 0,
    offset: Annotated[int | None, typer.Option("--offset", help="Start at this offset.")] = None,
    last: Annotated[bool, typer.Option("--last", help="The newest COUNT messages.")] = False,
    next_: Annotated[
        bool, typer.Option("--next", help="After the consumer's stored offset (auto-commit).")
    ] = False,
    count: Annotated[int, typer.Option("--count", help="Messages at most.")] = 100,
    consumer: Annotated[str, typer.Option("--consumer", help="Consumer id or name.")] = "1",
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Read messages of TOPIC of STREAM (from the first one unless told otherwise)."""
    from broker.cli import admin
    from sdk import wire

    if offset is not None:
        strategy = wire.PollingStrategy(wire.PollingKind.OFFSET, offset)
    elif last:
        strategy = wire.PollingStrategy(wire.PollingKind.LAST, 0)
    elif next_:
        strategy = wire.PollingStrategy(wire.PollingKind.NEXT, 0)
    else:
        strategy = wire.PollingStrategy(wire.PollingKind.FIRST, 0)
    run_admin(
        "poll",
        admin.poll,
        target(address, username, password, token),
        stream,
        topic,
        partition=partition,
        strategy=strategy,
        count=count,
        consumer=consumer,
        auto_commit=next_,
    )


@cluster_app.command("status")
def cluster_status(
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show the nodes, which one leads the metadata plane, and which answer."""
    from broker.cli import admin

    run_admin("cluster status", admin.cluster_status, target(address, username, password, token))


@app.command()
def stats(
    as_json: Annotated[bool, typer.Option("--json", help="Everything, as JSON.")] = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Server statistics (GET_STATS) and the per-group consensus counters."""
    from broker.cli import admin

    run_admin("stats", admin.stats, target(address, username, password, token), as_json=as_json)


register_resources(app)
