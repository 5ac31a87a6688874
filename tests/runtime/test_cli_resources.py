"""The ``viewstream`` CLI's resource commands against a real node over TCP: users,
personal access tokens (and a login with one, by flag and by ``VIEWSTREAM_TOKEN``),
partitions, segments, consumer groups, consumer offsets, clients, ``me`` and ``ping``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker.cli import app
from broker.cli.forms import (
    describe_permissions,
    parse_expiry,
    parse_permissions,
)
from sdk.wire import GlobalPermissions, Permissions, StreamPermissions, TopicPermissions
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess

runner = CliRunner()


def run(node: NodeProcess, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Exit code and output (stdout and stderr) of one command, logged in as root."""
    result = runner.invoke(
        app, [*args, "--address", node.address, "--password", ROOT_PASSWORD], env=env
    )
    return result.exit_code, result.output


def ok(node: NodeProcess, *args: str) -> str:
    code, output = run(node, *args)
    assert code == 0, output
    return output


def with_token(node: NodeProcess, token: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--address", node.address, "--token", token])
    return result.exit_code, result.output


def test_user_commands_create_show_change_and_delete_a_user(node: NodeProcess) -> None:
    created = ok(node, "user", "create", "cli-erin", "erin-pass", "-g", "r_str,p_msg")
    assert "created user 'cli-erin'" in created and "active" in created
    assert "cli-erin" in ok(node, "user", "list")
    shown = ok(node, "user", "get", "cli-erin")
    assert "global: read_streams,poll_messages" in shown
    ok(node, "user", "name", "cli-erin", "cli-erin2")
    ok(node, "user", "status", "cli-erin2", "inactive")
    ok(node, "user", "permissions", "cli-erin2", "-s", "1:r_str#2:s_msg")
    details = json.loads(ok(node, "user", "get", "cli-erin2", "--json"))
    assert details["user"]["status"] == "inactive"
    assert details["permissions"]["streams"][0]["topics"][0]["send_messages"] is True
    assert "changed the password" in ok(
        node, "user", "password", "cli-erin2", "erin-pass", "erin-pass-2"
    )
    ok(node, "user", "delete", "cli-erin2")
    assert "no user 'cli-erin2'" in ok(node, "user", "get", "cli-erin2")


def test_user_create_refused_or_malformed_exits_non_zero_with_the_reason(
    node: NodeProcess,
) -> None:
    code, output = run(node, "user", "create", "ab", "short-name-pass")
    assert code == 1
    assert "user create: the server refused" in output and "INVALID_USERNAME=43" in output
    code, output = run(node, "user", "create", "cli-frank", "pass", "-g", "no_such_flag")
    assert code == 2 and "no_such_flag" in output


def test_token_created_by_the_cli_logs_in_by_flag_and_env_until_deleted(
    node: NodeProcess,
) -> None:
    ok(node, "user", "create", "cli-gina", "gina-pass")
    result = runner.invoke(
        app,
        ["pat", "create", "cli-gina-token", "1day", "-q", "--address", node.address],
        env={"VIEWSTREAM_USERNAME": "cli-gina", "VIEWSTREAM_PASSWORD": "gina-pass"},
    )
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    assert len(token) >= 43 and "\n" not in token
    code, me = with_token(node, token, "me", "--json")
    assert code == 0, me
    gina = json.loads(ok(node, "user", "get", "cli-gina", "--json"))["user"]["id"]
    assert json.loads(me)["user_id"] == gina
    code, listed = with_token(node, token, "pat", "list")
    assert code == 0 and "cli-gina-token" in listed and "never" not in listed
    by_env = runner.invoke(app, ["me", "--address", node.address], env={"VIEWSTREAM_TOKEN": token})
    assert by_env.exit_code == 0 and f"user {gina}," in by_env.output
    # A token session has its owner's rights only: gina may not list users.
    code, refused = with_token(node, token, "user", "list")
    assert code == 1 and "UNAUTHORIZED=41" in refused
    code, deleted = with_token(node, token, "pat", "delete", "cli-gina-token")
    assert code == 0, deleted
    code, gone = with_token(node, token, "me")
    assert code == 1 and "me: invalid_credentials" in gone
    ok(node, "user", "delete", "cli-gina")


def test_pat_create_prints_the_token_once_and_refuses_a_bad_expiry(node: NodeProcess) -> None:
    created = ok(node, "pat", "create", "cli-root-token")
    assert "never expires" in created and "shown only this once" in created
    token = created.strip().splitlines()[-1]
    assert token not in ok(node, "pat", "list")
    code, output = run(node, "pat", "create", "cli-root-token-2", "3fortnights")
    assert code == 2 and "fortnights" in output
    ok(node, "pat", "delete", "cli-root-token")


def test_partition_and_segment_commands_add_list_and_delete(
    node: NodeProcess,
) -> None:
    ok(node, "stream", "create", "cli-parts")
    ok(node, "topic", "create", "cli-parts", "t")
    assert "it has 3 now" in ok(node, "partition", "create", "cli-parts", "t", "2")
    listed = json.loads(ok(node, "partition", "list", "cli-parts", "t", "--json"))
    assert [p["id"] for p in listed] == [0, 1, 2]
    assert "it has 2 now" in ok(node, "partition", "delete", "cli-parts", "t", "1")
    ok(node, "segment", "delete", "cli-parts", "t", "0", "1")  # none sealed: nothing to do
    code, output = run(node, "segment", "delete", "cli-parts", "t", "5", "1")
    assert code == 1 and "segment delete: the server refused" in output
    assert "PARTITION_NOT_FOUND=3007" in output
    code, output = run(node, "partition", "create", "cli-parts", "t", "0")
    assert code == 2
    ok(node, "stream", "delete", "cli-parts")


def test_consumer_group_and_offset_commands(node: NodeProcess) -> None:
    ok(node, "stream", "create", "cli-groups")
    ok(node, "topic", "create", "cli-groups", "t", "--partitions", "2")
    assert "created consumer group 'g'" in ok(
        node, "consumer-group", "create", "cli-groups", "t", "g"
    )
    assert " g" in ok(node, "consumer-group", "list", "cli-groups", "t")
    group = json.loads(ok(node, "consumer-group", "get", "cli-groups", "t", "g", "--json"))
    assert group["group"]["partitions_count"] == 2 and group["members"] == []
    ok(node, "send", "cli-groups", "t", "a", "b", "c", "--partition", "1")
    ok(node, "consumer-offset", "set", "c7", "cli-groups", "t", "1", "1")
    stored = json.loads(ok(node, "consumer-offset", "get", "c7", "cli-groups", "t", "1", "--json"))
    assert (stored["stored_offset"], stored["current_offset"]) == (1, 2)
    ok(node, "consumer-offset", "set", "g", "cli-groups", "t", "1", "2", "--kind", "consumer-group")
    text = ok(node, "consumer-offset", "get", "g", "cli-groups", "t", "1", "-k", "consumer-group")
    assert "stored offset 2" in text
    ok(node, "consumer-offset", "delete", "c7", "cli-groups", "t", "1")
    assert "no offset stored" in ok(node, "consumer-offset", "get", "c7", "cli-groups", "t", "1")
    ok(node, "consumer-group", "delete", "cli-groups", "t", "g")
    code, output = run(node, "consumer-group", "get", "cli-groups", "t", "g")
    assert code == 0 and "no consumer group 'g'" in output
    ok(node, "stream", "delete", "cli-groups")


def test_consumer_group_create_takes_the_iggy_clis_group_id_flag(node: NodeProcess) -> None:
    ok(node, "stream", "create", "cli-group-ids")
    ok(node, "topic", "create", "cli-group-ids", "t")
    created = ok(node, "consumer-group", "create", "cli-group-ids", "t", "a")
    assigned = int(created.split("(id ")[1].split(")")[0])
    # The id the server will assign next, asked for with -g: nothing to report.
    wished = ok(
        node, "consumer-group", "create", "-g", str(assigned + 1), "cli-group-ids", "t", "b"
    )
    assert f"(id {assigned + 1})" in wished and "note:" not in wished
    # Another id: the group is created with the server's id, and the answer says so.
    other = ok(node, "consumer-group", "create", "cli-group-ids", "t", "c", "--group-id", "999")
    assert f"(id {assigned + 2})" in other
    assert "note: id 999 was asked for; the server assigns consumer group ids" in other
    code, output = run(node, "consumer-group", "create", "cli-group-ids", "t", "d", "-g", "-1")
    assert code == 2, output
    ok(node, "stream", "delete", "cli-group-ids")


def test_client_me_and_ping_commands(node: NodeProcess) -> None:
    me = json.loads(ok(node, "me", "--json"))
    assert me["user_id"] == 0 and me["address"].startswith("127.0.0.1:")
    listed = json.loads(ok(node, "client", "list", "--json"))
    # The command's own connection is one of the node's clients while it runs.
    assert any(c["user_id"] == 0 for c in listed)
    assert "client" in ok(node, "client", "list").splitlines()[0]
    assert "no client 4294967295" in ok(node, "client", "get", "4294967295")
    pinged = runner.invoke(app, ["ping", "--count", "2", "--address", node.address])
    assert pinged.exit_code == 0, pinged.output
    assert "2 ping(s): min" in pinged.output
    assert pinged.output.count(f"ping {node.address}:") == 2


def test_ping_of_a_node_that_is_not_there_fails_within_its_bound() -> None:
    from tests.runtime.processes import free_port

    result = runner.invoke(app, ["ping", "--address", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == 1 and result.output.startswith("ping: ")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(None, None), ("none", None), ("30s", 30.0), ("15days 2min 2s", 15 * 86400 + 122.0)],
)
def test_expiry_forms_read_as_iggy_writes_them(text: str | None, seconds: float | None) -> None:
    assert parse_expiry(text) == seconds


@pytest.mark.parametrize("text", ["0s", "15", "2 parsecs", "1day x"])
def test_malformed_expiry_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_expiry(text)


def test_permission_forms_parse_and_print_back_in_iggys_names() -> None:
    permissions = parse_permissions("m_srv,read_users", ["4:manage_stream,r_top#1:s_msg,p_msg"])
    assert permissions == Permissions(
        GlobalPermissions(manage_servers=True, read_users=True),
        (
            StreamPermissions(
                4,
                manage_stream=True,
                read_topics=True,
                topics=(TopicPermissions(1, poll_messages=True, send_messages=True),),
            ),
        ),
    )
    assert describe_permissions(permissions) == [
        "global: manage_servers,read_users",
        "stream 4: manage_stream,read_topics",
        "  topic 1: poll_messages,send_messages",
    ]
    assert parse_permissions(None, []) is None
    bad: list[tuple[str | None, list[str]]] = [
        ("x_srv", []),
        (None, ["one:r_str"]),
        (None, ["1", "1"]),
        (None, ["1#2#2"]),
    ]
    for global_text, stream_texts in bad:
        with pytest.raises(ValueError):
            parse_permissions(global_text, stream_texts)
