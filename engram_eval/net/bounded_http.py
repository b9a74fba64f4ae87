"""The HTTP client the chat client hands to ``openai``: each request has a total deadline
and a reply size cap, both enforced while it runs.

The ``openai`` client's ``timeout`` bounds each socket read, not the request: a server that
sends one byte a second never trips it. And it reads a reply whole before anything can look
at its size: a 1.5 GB or an endless chunked reply fills memory first. Here, every request
sent through :func:`bounded_client`'s client:

* ends by its deadline (``deadline`` seconds after it is sent), whatever the server does:
  each connect, write and read of its connection may wait at most the time left
  (:class:`_DeadlineStream`), so a trickle of headers or of body is cut at the deadline
  like silence is (an ``httpx2.ReadTimeout``, which ``openai`` raises as
  ``APITimeoutError``);
* reads at most ``max_bytes`` of reply body, counted while it is read (:class:`_CappedBody`):
  one more byte is :class:`ReplyRefused`, so a runaway reply costs ``max_bytes`` of memory;
* asks for an uncompressed reply (``Accept-Encoding: identity``) and refuses a compressed
  one: its size on the wire says nothing of its size in memory.

The deadline is kept per thread (a request and the reading of its reply run in the thread
that sent it; requests run in several threads at once), and the connection pools of the
client (direct and through any proxy) are given a network backend that applies it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore2
import httpx2

from engram_eval.errors import EngramEvalError

_local = threading.local()


class ReplyRefused(EngramEvalError):
    """A reply too large or compressed: reading it stopped (its message says why)."""


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The wait allowed to one network operation of this thread's request: ``timeout``, at
    most the time left before its deadline; ``expired`` is raised when none is left."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every read and write waits at most until the deadline of the
    request of the thread using it."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(
            ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """A network backend whose connections are :class:`_DeadlineStream` and whose connects
    wait at most until the deadline."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(
            host, port, _left(timeout, httpcore2.ConnectTimeout), local_address,
            socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(
            path, _left(timeout, httpcore2.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _CappedBody(httpx2.SyncByteStream):
    """A reply body that refuses its ``limit + 1``-th byte (:class:`ReplyRefused`)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ReplyRefused(f"the reply is longer than {self._limit} bytes (the limit "
                                   "for one reply); stopped reading it")
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _BoundedClient(httpx2.Client):
    """``httpx2.Client`` whose :meth:`send` applies the deadline and the size cap (see the
    module docstring). A reply is always read whole here, before it is returned."""

    def __init__(self, *, deadline: float, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(headers={"Accept-Encoding": "identity"}, **kwargs)
        self.deadline = deadline
        self.max_bytes = max_bytes
        pools = [getattr(t, "_pool", None) for t in (self._transport, *self._mounts.values())
                 if t is not None]
        if not pools or any(not hasattr(p, "_network_backend") for p in pools):
            raise RuntimeError("httpx2 keeps its connection pools elsewhere than this "
                               "package expects: the request deadline cannot be applied")
        for pool in pools:
            pool._network_backend = _DeadlineBackend(pool._network_backend)  # type: ignore[union-attr]

    def send(self, request: httpx2.Request, *, stream: bool = False,
             **kwargs: Any) -> httpx2.Response:
        outer = getattr(_local, "deadline", None)
        _local.deadline = time.monotonic() + self.deadline
        try:
            response = super().send(request, stream=True, **kwargs)
            try:
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise ReplyRefused("the reply is compressed (Content-Encoding "
                                       f"{encoding[:40]!r}) though an uncompressed one was "
                                       "asked for; its size could not be bounded")
                response.stream = _CappedBody(response.stream, self.max_bytes)
                response.read()
            finally:
                response.close()
        finally:
            _local.deadline = outer
        return response


def bounded_client(deadline: float, max_bytes: int) -> httpx2.Client:
    """An ``httpx2.Client`` for ``openai.OpenAI(http_client=...)`` whose every request ends
    by ``deadline`` seconds and reads at most ``max_bytes`` of reply (module docstring)."""
    return _BoundedClient(deadline=deadline, max_bytes=max_bytes, timeout=deadline,
                          follow_redirects=True,
                          limits=httpx2.Limits(max_connections=1000,
                                               max_keepalive_connections=100))
