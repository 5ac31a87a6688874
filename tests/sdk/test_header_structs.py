"""The client core's one-call header structs write and read the same bytes as the
header classes they stand in for (``RequestHeader``, ``ReplyHeader``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk._protocol import _REPLY_ECHO, _REQUEST_STAMP
from sdk.wire import HEADER_SIZE, Operation
from sdk.wire.codes import Command
from sdk.wire.header import ReplyHeader, RequestHeader

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
U128 = st.integers(0, 2**128 - 1)
OPERATIONS = st.sampled_from(list(Operation))


@given(size=U32, client=U128, request=U64, session=U64, operation=OPERATIONS)
def test_the_request_stamp_writes_what_the_request_header_writes(
    size: int, client: int, request: int, session: int, operation: Operation
) -> None:
    expected = bytearray(HEADER_SIZE)
    RequestHeader(
        size=size, client=client, request=request, session=session, operation=operation
    ).pack_into(expected)
    stamped = bytearray(b"\xff" * HEADER_SIZE)  # every byte it skips is written zero too
    _REQUEST_STAMP.pack_into(
        stamped,
        0,
        size,
        Command.REQUEST,
        client.to_bytes(16, "little"),
        request,
        operation,
        session,
    )
    assert stamped == expected


@given(
    client=U128,
    request=U64,
    operation=OPERATIONS,
    status=U32,
    view=U32,
    replica=st.integers(0, 255),
    others=st.tuples(U64, U64, U64, U64),
)
def test_the_reply_echo_reads_what_the_reply_header_wrote(
    client: int,
    request: int,
    operation: Operation,
    status: int,
    view: int,
    replica: int,
    others: tuple[int, int, int, int],
) -> None:
    op, commit, timestamp, context = others
    buffer = bytearray(HEADER_SIZE)
    ReplyHeader(
        size=HEADER_SIZE,
        client=client,
        request=request,
        operation=operation,
        status=status,
        op=op,
        commit=commit,
        timestamp=timestamp,
        context=context,
        view=view,
        replica=replica,
    ).pack_into(buffer)
    fields = _REPLY_ECHO.unpack_from(buffer)
    assert fields == (
        view,
        Command.REPLY,
        replica,
        client.to_bytes(16, "little"),
        request,
        operation,
        status,
    )
