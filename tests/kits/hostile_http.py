"""Hostile HTTP servers on 127.0.0.1, and seatplan run against them in a child process that is measured.

The servers are stand-ins written with raw sockets: no real vLLM engine, Prometheus, LiteLLM gateway or Hub drips
header bytes, sends ``102 Processing`` forever or answers without end on demand. Each reads one request per
connection and lets ``answer(path, connection, stop)`` write whatever bytes it likes back; the request's head is
in ``server.request.head`` (per connection thread), every head in ``server.heads``.

:func:`run_measured` runs ``python -m seatplan.cli ARGS`` and reports its exit, output, peak memory (the child's
own ``ru_maxrss``, from ``wait4``) and whether it had to be killed at the limit, which a test counts as a hang.
"""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kits.cli import child_environment

Answer = Callable[[str, socket.socket, threading.Event], None]
DRIP_PAUSE_S = 0.02
# A run that has not ended after this long hangs: far beyond any deadline the tests give (a few seconds).
HANG_LIMIT_S = 60.0


class _Listener(socketserver.ThreadingTCPServer):
    # socketserver's backlog is 5: forty clients connecting at once on a busy machine would see their SYNs dropped
    # and retried a second later, past a 3 s deadline, and the test would blame the client for never asking.
    request_queue_size = 128


class HostileServer:
    """A TCP server on 127.0.0.1 that reads one HTTP request per connection and lets ``answer(path, socket,
    stop)`` write whatever bytes it likes back."""

    def __init__(self, answer: Answer) -> None:
        self.stop = threading.Event()
        self.paths: list[str] = []
        self.heads: list[str] = []
        self.request = threading.local()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                head = b""
                while b"\r\n\r\n" not in head and len(head) < 1 << 16:
                    piece = self.request.recv(4096)
                    if not piece:
                        return
                    head += piece
                text = head.decode("latin-1")
                length = next((int(line.split(":", 1)[1]) for line in text.split("\r\n") if line.lower().startswith("content-length:")), 0)
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < length:
                    body += self.request.recv(4096)
                path = text.split(" ", 2)[1]
                server.paths.append(path)
                server.heads.append(text)
                server.request.head = text
                try:
                    answer(path, self.request, server.stop)
                except OSError:
                    pass  # the client gave up on the answer, as it should

        self.tcp = _Listener(("127.0.0.1", 0), Handler)
        self.tcp.daemon_threads = True
        self.port = self.tcp.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self.tcp.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.tcp.shutdown()
        self.tcp.server_close()


def respond(connection: socket.socket, status: int, body: bytes | str, content_type: str = "application/json",
            headers: Mapping[str, str] | None = None) -> None:
    data = body.encode() if isinstance(body, str) else body
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    connection.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(data)}\r\n{extra}"
                       "Connection: close\r\n\r\n".encode() + data)


def everywhere(write: Callable[[socket.socket, threading.Event], None]) -> Answer:
    return lambda path, connection, stop: write(connection, stop)


def drip_headers(connection: socket.socket, stop: threading.Event) -> None:
    """A status line, then one header byte at a time, never ending the headers."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not stop.wait(DRIP_PAUSE_S):
        connection.sendall(b"a")


def processing_forever(connection: socket.socket, stop: threading.Event) -> None:
    """``102 Processing`` after ``102 Processing``: httpcore skips each and waits for the next."""
    while not stop.wait(DRIP_PAUSE_S):
        connection.sendall(b"HTTP/1.1 102 Processing\r\n\r\n")


def drip_body(connection: socket.socket, stop: threading.Event) -> None:
    """Whole headers announcing a large body, then one body byte at a time."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[")
    while not stop.wait(DRIP_PAUSE_S):
        connection.sendall(b" ")


def endless_body(connection: socket.socket, stop: threading.Event) -> None:
    """A body with no length that never ends (read until the connection closes, by HTTP/1.1's rules)."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[")
    chunk = b" " * (1 << 16)
    while not stop.is_set():
        connection.sendall(chunk)


def huge_body(size_bytes: int) -> Callable[[socket.socket, threading.Event], None]:
    """A body of ``size_bytes`` announced by its Content-Length, sent as fast as the client reads it."""
    def write(connection: socket.socket, stop: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % size_bytes)
        chunk, sent = b"#" * (1 << 16), 0
        while sent < size_bytes and not stop.is_set():
            connection.sendall(chunk[:size_bytes - sent])
            sent += len(chunk)
    return write


def redirect_to(url: str, status: int = 307) -> Callable[[socket.socket, threading.Event], None]:
    """Every request sent on to ``url`` + its own path (307 keeps the method and, in a careless client, the headers)."""
    def write(connection: socket.socket, stop: threading.Event) -> None:
        respond(connection, status, b"", headers={"Location": url})
    return write


def header_value(head: str, name: str) -> str | None:
    """A request header's value from a request head, by name without case."""
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@dataclass
class Measured:
    exit_code: int | None  # None: killed at the limit (a hang)
    stdout: str
    stderr: str
    peak_rss_bytes: int

    @property
    def hung(self) -> bool:
        return self.exit_code is None


def run_measured(*args: str, env: Mapping[str, str | None] | None = None, limit_s: float = HANG_LIMIT_S) -> Measured:
    """``python -m seatplan.cli ARGS`` in a child process, killed at ``limit_s``; its peak memory from ``wait4``."""
    environment = child_environment(env)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen([sys.executable, "-m", "seatplan.cli", *args], stdout=out, stderr=err, env=environment)
        ends_at = time.monotonic() + limit_s
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                exit_code: int | None = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > ends_at:
                os.kill(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                exit_code = None
                break
            time.sleep(0.05)
        child.returncode = -1  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Measured(exit_code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                        usage.ru_maxrss * 1024)
