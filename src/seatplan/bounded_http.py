"""HTTP with every bound a server controls: one deadline per request, a size cap, no proxy from the environment.

Used wherever seatplan asks a server it does not control (verify's probes, adopt's engine reads):

- time: one deadline per request covers resolving the host name (``getaddrinfo`` has no timeout of its own, so
  it runs on a daemon thread the request stops waiting for), connecting, the status line and headers (a server that drips header
  bytes, or sends ``102 Processing`` forever, which httpcore skips one after another) and the body; httpx's own
  timeouts restart with every byte, so the deadline lives in the network layer (:class:`_DeadlineBackend`);
- size: an answer longer than ``MAX_ANSWER_BYTES`` is dropped (h11 already refuses headers over 64 KiB);
- what is kept: texts are scrubbed of the secrets in play and then cut to ``SHOWN_CHARS``, so a cut cannot leave
  part of a key behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

import httpcore
import httpx

from seatplan.jsontext import loads_bounded
from seatplan.output import clipped
from seatplan.secrets import scrub

__all__ = ["BODY_TEXT_BYTES", "MAX_ANSWER_BYTES", "SHOWN_CHARS", "BoundedClient", "body_text"]

# What is kept of a server's text (an error body, a version): enough to read, never a flood.
SHOWN_CHARS = 300
# The largest answer read: a /metrics page of a busy engine is a few hundred KiB.
MAX_ANSWER_BYTES = 8 << 20
T = TypeVar("T")


class _Deadline:
    """The instant the current request must be done by (None between requests)."""

    def __init__(self, limit_s: float) -> None:
        self.at: float | None = None
        self.limit_s = limit_s

    def run(self, step: Callable[[float | None], T], timeout_s: float | None, error: type[Exception]) -> T:
        """``step(timeout)`` given no more time than is left; ``error`` saying so once the deadline has passed."""
        if self.at is None:
            return step(timeout_s)
        remaining_s = self.at - time.monotonic()
        if remaining_s > 0:
            try:
                return step(remaining_s if timeout_s is None else min(timeout_s, remaining_s))
            except httpcore.TimeoutException:
                if time.monotonic() < self.at:
                    raise
        raise error(f"no complete answer within {self.limit_s:g} s")


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write waits no later than the request's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._deadline.run(lambda left_s: self._stream.read(max_bytes, left_s), timeout, httpcore.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._deadline.run(lambda left_s: self._stream.write(buffer, left_s), timeout, httpcore.WriteTimeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        secured = self._deadline.run(lambda left_s: self._stream.start_tls(ssl_context, server_hostname, left_s), timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self._backend, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        failure: Exception = httpcore.ConnectError(f"{host} has no address")
        for address in self._deadline.run(lambda left_s: _addresses(host, port, left_s), timeout, httpcore.ConnectTimeout):
            try:
                connect = partial(self._backend.connect_tcp, address, port, local_address=local_address, socket_options=socket_options)
                stream = self._deadline.run(connect, timeout, httpcore.ConnectTimeout)
            except httpcore.ConnectError as error:  # the next address, as socket.create_connection does
                failure = error
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._deadline.run(lambda left_s: self._backend.connect_unix_socket(path, left_s, socket_options), timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


# httpcore's errors → httpx's, the most specific first (as httpx's own transport maps them: httpx 0.28
# httpx/_transports/default.py HTTPCORE_EXC_MAP), so callers catch httpx.TimeoutException, httpx.ConnectError, ...
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException), (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError), (httpcore.WriteError, httpx.WriteError), (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError), (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError), (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as error:
        mapped = next((to for origin, to in _HTTPX_ERRORS if isinstance(error, origin)), None)
        if mapped is None:
            raise
        raise mapped(str(error)) from error


class _AnswerStream(httpx.SyncByteStream):
    """The body as httpcore reads it, its errors as httpx's (a deadline passing mid-body is httpx.ReadTimeout)."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _DeadlineTransport(httpx.BaseTransport):
    """httpx's transport from public parts: httpcore's connection pool on the deadline's network backend
    (httpcore's public ``network_backend`` hook), requests and answers converted as httpx's own transport does."""

    def __init__(self, deadline: _Deadline) -> None:
        self._pool = httpcore.ConnectionPool(network_backend=_DeadlineBackend(deadline))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)  # a sync client's request
        url = httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port, target=request.url.raw_path)
        core = httpcore.Request(method=request.method, url=url, headers=request.headers.raw, content=request.stream,
                                extensions=request.extensions)
        with _as_httpx_errors():
            answer = self._pool.handle_request(core)
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(status_code=answer.status, headers=answer.headers, stream=_AnswerStream(answer.stream),
                              extensions=answer.extensions)

    def close(self) -> None:
        with _as_httpx_errors():
            self._pool.close()


def _addresses(host: str, port: int, timeout_s: float | None) -> list[str]:
    """The addresses ``host`` resolves to, given no more than ``timeout_s``: a resolver that hangs is left behind."""
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    answer: dict[str, Any] = {}

    def resolve() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            answer["error"] = error

    resolver = threading.Thread(target=resolve, name=f"resolve {host}", daemon=True)
    resolver.start()
    resolver.join(timeout_s)
    if resolver.is_alive():
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than {timeout_s:g} s")
    if "error" in answer:
        raise httpcore.ConnectError(f"cannot resolve {host}: {answer['error']}")
    return list(dict.fromkeys(str(info[4][0]) for info in answer["infos"]))


class BoundedClient:
    """An httpx client whose every request has one deadline, a size cap and no proxy from the environment."""

    def __init__(self, base_url: str, timeout_s: float, secrets: tuple[str, ...] = (), headers: dict[str, str] | None = None) -> None:
        self.deadline = _Deadline(timeout_s)
        # Scrubbed from every text kept from an answer (a gateway may quote its key back).
        self.secrets = secrets
        # httpx offers no per-request deadline and its HTTPTransport takes no network backend: the transport is
        # httpcore's pool on the deadline's backend (_DeadlineTransport), with httpcore's default settings.
        self.client = httpx.Client(base_url=base_url, headers={**(headers or {}), "Accept-Encoding": "identity"},
                                   timeout=timeout_s, transport=_DeadlineTransport(self.deadline), trust_env=False)

    def __enter__(self) -> BoundedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def fetch(self, method: str, path: str, **request: Any) -> httpx.Response:
        """One request, done within the deadline, and no more than MAX_ANSWER_BYTES of its answer."""
        self.deadline.at = time.monotonic() + self.deadline.limit_s
        body = bytearray()
        try:
            with self.client.stream(method, path, **request) as response:
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise ValueError(f"{path} answered more than {MAX_ANSWER_BYTES:,} bytes")
        finally:
            self.deadline.at = None
        return httpx.Response(response.status_code, headers={"content-type": response.headers.get("content-type", "")},
                              content=bytes(body), request=response.request)

    def json(self, method: str, path: str, **request: Any) -> Any:
        """The JSON answer of a request that must succeed (2xx), read with bounded depth and finite numbers."""
        return loads_bounded(self.fetch(method, path, **request).raise_for_status().content)

    def problem(self, error: Exception) -> str:
        """What went wrong, as seatplan shows it: scrubbed of the secrets, then cut to SHOWN_CHARS."""
        if isinstance(error, httpx.HTTPStatusError):
            text = f"HTTP {error.response.status_code} from {error.request.url.path}: {body_text(error.response)}"
        elif isinstance(error, httpx.HTTPError):
            text = f"{type(error).__name__}: {error}"
        else:
            text = f"unexpected answer ({type(error).__name__}: {error})"
        return self.shown(text)

    def shown(self, text: str) -> str:
        """``text`` as kept: the secrets hidden first, in a window wide enough that a key straddling
        the cut is hidden whole (a cut must not leave part of one), then cut to SHOWN_CHARS."""
        window = SHOWN_CHARS + 8 * max((len(secret) for secret in self.secrets), default=0)
        return clipped(scrub(text[:window], *self.secrets), SHOWN_CHARS, cut_before_chars=max(len(text) - window, 0))


# The most of an answer's body decoded for a message or a test of its wording (what is shown is far less).
BODY_TEXT_BYTES = 64 << 10


def body_text(response: httpx.Response) -> str:
    return response.content[:BODY_TEXT_BYTES].decode("utf-8", errors="replace")
