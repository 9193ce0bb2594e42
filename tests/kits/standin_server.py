"""A misbehaving HTTP server on 127.0.0.1 for verify's bound and secret tests (a stand-in: no real engine or
gateway hangs, floods or echoes a key on demand).

Modes: ``hang`` answers nothing until the test ends; ``trickle`` sends a chunked body one byte every 50 ms,
forever; ``flood`` sends an endless chunked body as fast as it can; ``echo`` answers 401 with the request's
Authorization header in the body (a gateway that quotes the key it refused). Every request is counted by path.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TRICKLE_PAUSE_S = 0.05
FLOOD_CHUNK = b"x" * 65536


class StandIn:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: Counter[str] = Counter()
        self.authorization: list[str] = []
        self.stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                standin.requests[self.path] += 1
                standin.authorization.append(self.headers.get("Authorization", ""))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                try:
                    getattr(self, f"answer_{standin.mode}")()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # verify gave up on the answer, as it should

            do_POST = do_GET  # noqa: N815

            def answer_hang(self) -> None:
                standin.stop.wait(60)

            def answer_trickle(self) -> None:
                self._chunked_start()
                while not standin.stop.wait(TRICKLE_PAUSE_S):
                    self.wfile.write(b"1\r\nx\r\n")
                    self.wfile.flush()

            def answer_flood(self) -> None:
                self._chunked_start()
                while not standin.stop.is_set():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(FLOOD_CHUNK), FLOOD_CHUNK))

            def answer_echo(self) -> None:
                body = f'{{"error": "invalid key: {self.headers.get("Authorization", "")}"}}'.encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunked_start(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        return Handler
