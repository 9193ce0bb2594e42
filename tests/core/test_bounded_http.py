"""``seatplan.bounded_http``'s transport, built from public httpx2 and httpcore2 parts, against real sockets on 127.0.0.1.

Callers (verify's probes, adopt's engine reads, diagnose, usage, the Hub) catch httpx2's errors, so each failure
httpcore2 raises in the network layer must reach them as httpx2's, while connecting and mid-body alike; the cap and the deadline are held by
tests/harden/test_hostile_verify.py against hostile servers. Bodies of random sizes over the whole range (empty to
the 8 MiB cap, and past it) come back whole or are refused.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpcore2
import httpx2
import pytest
from httpx2._transports.default import map_httpcore_exceptions

from seatplan.bounded_http import MAX_ANSWER_BYTES, AnswerTooLarge, BoundedClient, _httpx2_error


@contextmanager
def server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-thread HTTP server on 127.0.0.1 that answers every connection with ``answer``."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                try:
                    answer(connection)
                except OSError:
                    pass  # the client gave up on the answer (a body over the cap is refused at its announced length)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def body_of(size: int) -> Callable[[socket.socket], None]:
    def answer(connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        connection.sendall(b"x" * size)
    return answer


def test_bodies_of_every_size_come_back_whole_up_to_the_cap(rng):
    sizes = [0, 1, MAX_ANSWER_BYTES] + [rng.randint(2, MAX_ANSWER_BYTES - 1) for _ in range(3)]
    for size in sizes:
        with server(body_of(size)) as url, BoundedClient(url, timeout_s=30) as client:
            answer = client.fetch("GET", "/")
            assert answer.status_code == 200 and answer.content == b"x" * size
    with server(body_of(MAX_ANSWER_BYTES + rng.randint(1, 1 << 20))) as url, BoundedClient(url, timeout_s=30) as client:
        with pytest.raises(AnswerTooLarge, match="more than"):
            client.fetch("GET", "/")


def test_a_closed_port_is_httpx_connect_error():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with BoundedClient(f"http://127.0.0.1:{port}", timeout_s=5) as client, pytest.raises(httpx2.ConnectError):
        client.fetch("GET", "/")


def test_an_answer_cut_mid_body_is_httpx_remote_protocol_error(rng):
    promised = rng.randint(2, 1 << 20)

    def cut(connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % promised + b"x" * rng.randint(1, promised - 1))

    with server(cut) as url, BoundedClient(url, timeout_s=5) as client, pytest.raises(httpx2.RemoteProtocolError):
        client.fetch("GET", "/")


def test_a_body_that_stalls_past_the_deadline_is_httpx_read_timeout():
    def stall(connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nx")
        connection.recv(1)  # until the client gives up and closes

    with server(stall) as url, BoundedClient(url, timeout_s=0.5) as client:
        with pytest.raises(httpx2.ReadTimeout) as raised:
            client.fetch("GET", "/")
        assert isinstance(raised.value, httpx2.TimeoutException) and client.problem(raised.value).startswith("ReadTimeout: ")


@pytest.mark.parametrize("name", [name for name in dir(httpcore2) if isinstance(getattr(httpcore2, name), type)
                                  and issubclass(getattr(httpcore2, name), Exception)])
def test_every_httpcore2_error_becomes_the_httpx2_error_httpx2_itself_maps_it_to(name):
    """bounded_http derives the mapping by name (no copied table): it must agree with httpx2's own transport."""
    error = getattr(httpcore2, name)("boom")
    expected = None
    try:
        with map_httpcore_exceptions():
            raise error
    except httpx2.HTTPError as mapped:
        expected = type(mapped)
    except Exception:
        expected = None
    assert _httpx2_error(error) is expected
