"""HTTP with every bound a server controls: one deadline per request, a size cap, no proxy from the environment.

seatplan's one HTTP stack: ``httpx2`` (the client huggingface_hub 2.x brings) on ``httpcore2``, used for every
server seatplan asks, none it controls: verify's probes, adopt's engine reads, diagnose's Prometheus and
``/metrics`` reads, the gateway's spend API, and the Hub (``facts/hub.py`` gives huggingface_hub a client on :class:`BoundedTransport` as its client
factory).

- time: one deadline per request covers resolving the host name (``getaddrinfo`` has no timeout of its own, so
  it runs on a daemon thread the request stops waiting for), connecting, the status line and headers (a server that drips header
  bytes, or sends ``102 Processing`` forever, which httpcore skips one after another) and the body to its last byte;
  httpx's own timeouts restart with every byte, so the deadline lives in the network layer (:class:`_DeadlineBackend`);
- size: an answer longer than the transport's cap (``MAX_ANSWER_BYTES`` unless told) is dropped with
  :class:`AnswerTooLarge` (h11 already refuses headers over 64 KiB);
- no proxy, ``.netrc`` or certificate bundle from the environment (``trust_env=False``); a :class:`BoundedClient`
  follows no redirect (a 3xx is an error, so no header carrying a key is ever sent on), the Hub's client follows
  them as huggingface_hub needs and httpx2 drops ``Authorization`` on a redirect to another origin;
- what is kept: texts are scrubbed of the secrets in play and then cut to ``SHOWN_CHARS``, so a cut cannot leave
  part of a key behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import cache, partial
from typing import Any, TypeVar

import httpcore2
import httpx2

from seatplan.jsontext import loads_bounded
from seatplan.output import clipped
from seatplan.secrets import scrub
from seatplan.units import whole_number

__all__ = ["BODY_TEXT_BYTES", "MAX_ANSWER_BYTES", "SHOWN_CHARS", "AnswerTooLarge", "BoundedClient", "BoundedTransport",
           "body_text"]

# What is kept of a server's text (an error body, a version): enough to read, never a flood.
SHOWN_CHARS = 300
# The largest answer read: a /metrics page of a busy engine is a few hundred KiB.
MAX_ANSWER_BYTES = 8 << 20
T = TypeVar("T")


class AnswerTooLarge(httpx2.DecodingError):
    """An answer longer than the transport's cap: dropped unread past the cap (an httpx2 error, so every caller's
    ``except httpx2.HTTPError`` holds it, and huggingface_hub does not retry it)."""


class _Deadline:
    """The instant the current request must be done by (None between requests), one per thread: the Hub's client
    is shared, and each request (each hop of a redirect) has its own deadline."""

    def __init__(self, limit_s: float, until: float | None = None) -> None:
        self.limit_s = limit_s
        # A run's own end (time.monotonic()), when several requests share one budget: no request outlives it.
        self.until = until
        self._local = threading.local()

    @property
    def at(self) -> float | None:
        return getattr(self._local, "at", None)

    def start(self) -> None:
        at = time.monotonic() + self.limit_s
        self._local.at = at if self.until is None else min(at, self.until)

    def clear(self) -> None:
        self._local.at = None

    def run(self, step: Callable[[float | None], T], timeout_s: float | None, error: type[Exception]) -> T:
        """``step(timeout)`` given no more time than is left; ``error`` saying so once the deadline has passed."""
        at = self.at
        if at is None:
            return step(timeout_s)
        remaining_s = at - time.monotonic()
        if remaining_s > 0:
            try:
                return step(remaining_s if timeout_s is None else min(timeout_s, remaining_s))
            except httpcore2.TimeoutException:
                if time.monotonic() < at:
                    raise
        raise error(f"no complete answer within {self.limit_s:g} s")


class _DeadlineStream(httpcore2.NetworkStream):
    """A socket whose every read and write waits no later than the request's deadline."""

    def __init__(self, stream: httpcore2.NetworkStream, deadline: _Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._deadline.run(lambda left_s: self._stream.read(max_bytes, left_s), timeout, httpcore2.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._deadline.run(lambda left_s: self._stream.write(buffer, left_s), timeout, httpcore2.WriteTimeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore2.NetworkStream:
        secured = self._deadline.run(lambda left_s: self._stream.start_tls(ssl_context, server_hostname, left_s), timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self._backend, self._deadline = httpcore2.SyncBackend(), deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore2.NetworkStream:
        failure: Exception = httpcore2.ConnectError(f"{host} has no address")
        for address in self._deadline.run(lambda left_s: _addresses(host, port, left_s), timeout, httpcore2.ConnectTimeout):
            try:
                connect = partial(self._backend.connect_tcp, address, port, local_address=local_address, socket_options=socket_options)
                stream = self._deadline.run(connect, timeout, httpcore2.ConnectTimeout)
            except httpcore2.ConnectError as error:  # the next address, as socket.create_connection does
                failure = error
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore2.NetworkStream:
        stream = self._deadline.run(lambda left_s: self._backend.connect_unix_socket(path, left_s, socket_options), timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def _httpx2_error(error: Exception) -> type[httpx2.HTTPError] | None:
    """The httpx2 error that stands for an httpcore2 one: httpx2 names each of its transport errors as httpcore2 names
    the error it maps (``ConnectTimeout``, ``ReadError``, ``RemoteProtocolError``, ...), so the most specific class
    of ``error`` with a namesake in httpx2's public API is it. A rule, not a copied table: it follows both packages
    (tests/core/test_bounded_http.py checks it against httpx2's own mapping)."""
    for kind in type(error).__mro__:
        if kind.__module__.partition(".")[0] == "httpcore2":
            namesake = getattr(httpx2, kind.__name__, None)
            if isinstance(namesake, type) and issubclass(namesake, httpx2.HTTPError):
                return namesake
    return None


@contextlib.contextmanager
def _as_httpx2_errors() -> Iterator[None]:
    try:
        yield
    except Exception as error:
        mapped = _httpx2_error(error)
        if mapped is None:
            raise
        raise mapped(str(error)) from error


class _AnswerStream(httpx2.SyncByteStream):
    """The body as httpcore2 reads it, within the request's deadline (a deadline passing mid-body is
    httpx2.ReadTimeout) and its cap (:class:`AnswerTooLarge`), its errors as httpx2's."""

    def __init__(self, stream: Iterable[bytes], cap_bytes: int, deadline: _Deadline, url: str) -> None:
        self._stream, self._cap_bytes, self._deadline, self._url = stream, cap_bytes, deadline, url

    def __iter__(self) -> Iterator[bytes]:
        read_bytes = 0
        with _as_httpx2_errors():
            for chunk in self._stream:
                read_bytes += len(chunk)
                if read_bytes > self._cap_bytes:
                    raise AnswerTooLarge(f"{self._url} answered more than {self._cap_bytes:,} bytes")
                yield chunk

    def close(self) -> None:
        self._deadline.clear()
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _as_httpx2_errors():
                close()


@cache
def _tls_context() -> ssl.SSLContext:
    """The one TLS context of a process, with the CA bundle httpx2 ships and none from the environment. Loading that
    bundle takes 35-45 ms of CPU, and a transport is made per engine probed (``adopt --engine`` forty times) and per
    server asked. An SSLContext is safe to share between threads and connections; the only write to it after this is
    httpcore2's ALPN list at each TLS connect, ``http/1.1`` alike for every pool here (none speaks HTTP/2)."""
    return httpx2.create_ssl_context(trust_env=False)


class BoundedTransport(httpx2.BaseTransport):
    """httpx2's transport from public parts: httpcore2's connection pool on the deadline's network backend
    (httpcore2's public ``network_backend`` hook; httpx2's HTTPTransport takes none), requests and answers converted
    as httpx2's own transport does. Every request gets ``limit_s`` from its first byte sent to the last byte of its
    answer read, and no more than ``cap_bytes`` of answer."""

    def __init__(self, limit_s: float, cap_bytes: int = MAX_ANSWER_BYTES, until: float | None = None) -> None:
        self.deadline = _Deadline(limit_s, until)
        self.cap_bytes = cap_bytes
        self._pool = httpcore2.ConnectionPool(ssl_context=_tls_context(), network_backend=_DeadlineBackend(self.deadline))

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        assert isinstance(request.stream, httpx2.SyncByteStream)  # a sync client's request
        url = httpcore2.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port, target=request.url.raw_path)
        core = httpcore2.Request(method=request.method, url=url, headers=request.headers.raw, content=request.stream,
                                 extensions=request.extensions)
        self.deadline.start()
        try:
            with _as_httpx2_errors():
                answer = self._pool.handle_request(core)
        except BaseException:
            self.deadline.clear()
            raise
        assert isinstance(answer.stream, Iterable)
        where = f"{request.url.scheme}://{request.url.netloc.decode('ascii', 'replace')}{request.url.path}"
        announced = next((value.decode("latin-1") for key, value in answer.headers if key.lower() == b"content-length"), "")
        if (request.method != "HEAD" and "range" not in request.headers
                and (whole_number(announced, maximum=1 << 62) or 0) > self.cap_bytes):
            # refused before a byte of it is read; not a HEAD's length (the resource's, not the answer's), nor the
            # whole file's length from a server that ignored a Range (the caller reads only what it asked for)
            self.deadline.clear()
            close = getattr(answer.stream, "close", None)
            if close is not None:
                close()
            raise AnswerTooLarge(f"{where} announced {announced} bytes, more than {self.cap_bytes:,}")
        return httpx2.Response(status_code=answer.status, headers=answer.headers,
                               stream=_AnswerStream(answer.stream, self.cap_bytes, self.deadline, where), extensions=answer.extensions)

    def close(self) -> None:
        with _as_httpx2_errors():
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
        raise httpcore2.ConnectTimeout(f"resolving {host} took longer than {timeout_s:g} s")
    if "error" in answer:
        raise httpcore2.ConnectError(f"cannot resolve {host}: {answer['error']}")
    return list(dict.fromkeys(str(info[4][0]) for info in answer["infos"]))


class BoundedClient:
    """An httpx2 client whose every request has one deadline, a size cap, no proxy from the environment and no
    redirect followed (a 3xx is a failed request: whatever header carries a key never goes to another host)."""

    def __init__(self, base_url: str, timeout_s: float, secrets: tuple[str, ...] = (), headers: dict[str, str] | None = None,
                 cap_bytes: int = MAX_ANSWER_BYTES, until: float | None = None) -> None:
        """``until``: the instant (``time.monotonic()``) no request may outlive, for a run bounded as a whole."""
        # Scrubbed from every text kept from an answer (a gateway may quote its key back).
        self.secrets = secrets
        self.client = httpx2.Client(base_url=base_url, headers={**(headers or {}), "Accept-Encoding": "identity"},
                                    timeout=timeout_s, transport=BoundedTransport(timeout_s, cap_bytes, until), trust_env=False,
                                    follow_redirects=False)

    def __enter__(self) -> BoundedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def fetch(self, method: str, path: str, **request: Any) -> httpx2.Response:
        """One request, done within the deadline, and no more than the cap of its answer (:class:`AnswerTooLarge`)."""
        with self.client.stream(method, path, **request) as response:
            body = b"".join(response.iter_raw())
        return httpx2.Response(response.status_code, headers={"content-type": response.headers.get("content-type", ""),
                                                              "location": response.headers.get("location", "")},
                               content=body, request=response.request)

    def json(self, method: str, path: str, **request: Any) -> Any:
        """The JSON answer of a request that must succeed (2xx), read with bounded depth and finite numbers."""
        return loads_bounded(self.fetch(method, path, **request).raise_for_status().content)

    def problem(self, error: Exception) -> str:
        """What went wrong, as seatplan shows it: scrubbed of the secrets, then cut to SHOWN_CHARS."""
        if isinstance(error, httpx2.HTTPStatusError) and error.response.is_redirect:
            text = (f"HTTP {error.response.status_code} from {error.request.url.path}: a redirect to "
                    f"{error.response.headers.get('location', '')[:SHOWN_CHARS]!r}, not followed (nothing is sent on)")
        elif isinstance(error, httpx2.HTTPStatusError):
            text = f"HTTP {error.response.status_code} from {error.request.url.path}: {body_text(error.response)}"
        elif isinstance(error, httpx2.HTTPError):
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


def body_text(response: httpx2.Response) -> str:
    return response.content[:BODY_TEXT_BYTES].decode("utf-8", errors="replace")
