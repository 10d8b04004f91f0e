"""A small HTTP/1.1 GET for plain-http /metrics scrapes: one kept-alive connection per address.

A node's engines answer on 127.0.0.1 over plain HTTP every second; a general client spends more
on each request (its request model, auth and redirect layers, its pool) than parsing the page.
This sends one GET and reads the answer with h11 (the HTTP/1.1 framing httpx itself is built on:
Content-Length, chunked bodies and their trailers, bodies that run to the end of the connection,
keep-alive and ``Connection: close``), and says ``Unsupported`` for anything else (a redirect, a
compressed body), which the scraper then fetches with httpx. HTTPS always goes through httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

HEAD_LIMIT = 64 * 1024  # the status line and headers
READ = 256 * 1024  # bytes asked of the socket at a time


class Unsupported(Exception):
    """An answer this client does not read (the caller fetches it with httpx)."""


class TooLarge(Exception):
    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size  # the declared length, when the server said it


class Broken(ValueError):
    """The answer broke off or is not HTTP/1.1."""


class _Stale(ConnectionResetError):
    """A kept-alive connection the server closed between scrapes (nothing of an answer came)."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection


class Http1:
    def __init__(self) -> None:
        self._conns: dict[tuple[str, int], _Conn] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        # the request of each URL and headers, built (and its headers checked) once: an engine's
        # scrape asks the same thing every second, and h11's events are immutable
        self._requests: dict[
            tuple[str, tuple[tuple[str, str], ...]], tuple[tuple[str, int], h11.Request]
        ] = {}

    async def get(self, url: str, headers: dict[str, str], max_bytes: int) -> tuple[int, bytes]:
        """(status, body) of GET ``url`` (http only). Raises OSError and asyncio errors as the
        connection does, TooLarge past ``max_bytes``, Unsupported for what it does not read,
        Broken (a ValueError) for an answer that is not HTTP/1.1 or stops short."""
        asked = (url, tuple(headers.items()))
        known = self._requests.get(asked)
        if known is None:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port or 80
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            name = f"[{host}]" if ":" in host else host
            request = h11.Request(
                method="GET", target=target, headers=[("Host", f"{name}:{port}"), *headers.items()]
            )
            if len(self._requests) > 1024:  # URLs that come and go (a path being searched)
                self._requests.clear()
            known = self._requests[asked] = ((host, port), request)
        key, request = known
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            reused = key in self._conns
            try:
                return await self._exchange(key, request, max_bytes)
            except (_Stale, BrokenPipeError):
                self._drop(key)
                if not reused:
                    raise Broken("the connection closed before an answer") from None
                # the server closed a kept-alive connection between scrapes: once more, afresh
                try:
                    return await self._exchange(key, request, max_bytes)
                except _Stale:
                    self._drop(key)
                    raise Broken("the connection closed before an answer") from None
                except BaseException:
                    self._drop(key)
                    raise
            except BaseException:
                self._drop(key)  # a timeout or error mid-answer leaves the stream unusable
                raise

    async def _exchange(
        self, key: tuple[str, int], request: h11.Request, max_bytes: int
    ) -> tuple[int, bytes]:
        conn = self._conns.get(key)
        if conn is None:
            reader, writer = await asyncio.open_connection(key[0], key[1], limit=HEAD_LIMIT)
            conn = _Conn(reader, writer, h11.Connection(h11.CLIENT, HEAD_LIMIT))
            self._conns[key] = conn
        http = conn.http
        conn.writer.write(http.send(request) + http.send(h11.EndOfMessage()))
        await conn.writer.drain()
        status, body, size, answered = 0, [], 0, False
        while True:
            try:
                event = http.next_event()
            except h11.RemoteProtocolError as exc:
                if not answered and _eof(http):
                    raise _Stale() from None
                raise Broken(str(exc)) from None
            if event is h11.NEED_DATA:
                http.receive_data(await conn.reader.read(READ))
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise _Stale()
            answered = True
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                fields = {k.lower(): v.lower() for k, v in event.headers}
                if (
                    300 <= status < 400
                    or fields.get(b"content-encoding", b"identity") != b"identity"
                ):
                    self._drop(key)
                    raise Unsupported(status)
                length = fields.get(b"content-length")
                if length is not None and int(length) > max_bytes:
                    self._drop(key)
                    raise TooLarge(int(length))
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > max_bytes:
                    self._drop(key)
                    raise TooLarge(None)
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
        if http.our_state is h11.DONE and http.their_state is h11.DONE and not _eof(http):
            http.start_next_cycle()  # kept alive for the next scrape
        else:  # Connection: close, HTTP/1.0, or a body that ran to the end of the connection
            self._drop(key)
        return status, b"".join(body)

    def _drop(self, key: tuple[str, int]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.writer.close()

    async def aclose(self) -> None:
        # taken at once: a scrape being cancelled meanwhile may drop its own connection
        conns, self._conns = self._conns, {}
        for c in conns.values():
            c.writer.close()
        for c in conns.values():
            with contextlib.suppress(Exception):
                await c.writer.wait_closed()


def _eof(http: h11.Connection) -> bool:
    """Whether the peer has closed the connection, every byte it sent read."""
    return http.trailing_data == (b"", True)
