"""A small HTTP/1.1 GET for plain-http /metrics scrapes: one kept-alive connection per address.

A node's engines answer on 127.0.0.1 over plain HTTP every second; a general client spends more
on each request (its request model, auth and redirect layers, its pool) than parsing the page.
This reads exactly what a scrape needs — a status, Content-Length or chunked bodies, keep-alive —
and says ``Unsupported`` for anything else (a redirect, a compressed body), which the scraper then
fetches with httpx. HTTPS always goes through httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

HEAD_LIMIT = 64 * 1024  # the status line and headers


class Unsupported(Exception):
    """An answer this client does not read (the caller fetches it with httpx)."""


class TooLarge(Exception):
    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size  # the declared length, when the server said it


class Http1:
    def __init__(self) -> None:
        self._conns: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    async def get(self, url: str, headers: dict[str, str], max_bytes: int) -> tuple[int, bytes]:
        """(status, body) of GET ``url`` (http only). Raises OSError and asyncio errors as the
        connection does, TooLarge past ``max_bytes``, Unsupported for what it does not read."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 80
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        name = f"[{host}]" if ":" in host else host
        lines = [f"GET {target} HTTP/1.1", f"Host: {name}:{port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        key = (host, port)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            reused = key in self._conns
            try:
                return await self._exchange(key, request, max_bytes)
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
                self._drop(key)
                if not reused:
                    raise
                # the server closed a kept-alive connection between scrapes: once more, afresh
                try:
                    return await self._exchange(key, request, max_bytes)
                except BaseException:
                    self._drop(key)
                    raise
            except BaseException:
                self._drop(key)  # a timeout or error mid-answer leaves the stream unusable
                raise

    async def _exchange(
        self, key: tuple[str, int], request: bytes, max_bytes: int
    ) -> tuple[int, bytes]:
        conn = self._conns.get(key)
        if conn is None:
            conn = await asyncio.open_connection(key[0], key[1], limit=HEAD_LIMIT)
            self._conns[key] = conn
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        status = int(rest[:3])
        fields: dict[str, str] = {}
        for line in header_lines:
            if line:
                k, _, v = line.partition(":")
                fields[k.strip().lower()] = v.strip()
        if 300 <= status < 400 or fields.get("content-encoding", "identity") != "identity":
            self._drop(key)
            raise Unsupported(status)
        if "chunked" in fields.get("transfer-encoding", "").lower():
            body = await _chunked(reader, max_bytes)
        elif "content-length" in fields:
            length = int(fields["content-length"])
            if length > max_bytes:
                self._drop(key)
                raise TooLarge(length)
            body = await reader.readexactly(length)
        else:  # the body runs to the end of the connection
            body = await reader.read(max_bytes + 1)
            while len(body) <= max_bytes:
                more = await reader.read(max_bytes + 1 - len(body))
                if not more:
                    break
                body += more
            self._drop(key)
            if len(body) > max_bytes:
                raise TooLarge(None)
            return status, body
        close = fields.get("connection", "").lower()
        if close == "close" or (version == "HTTP/1.0" and close != "keep-alive"):
            self._drop(key)
        return status, body

    def _drop(self, key: tuple[str, int]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn[1].close()

    async def aclose(self) -> None:
        # taken at once: a scrape being cancelled meanwhile may drop its own connection
        conns, self._conns = self._conns, {}
        for _, writer in conns.values():
            writer.close()
        for _, writer in conns.values():
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _chunked(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        n = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if n == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            return b"".join(parts)
        size += n
        if size > max_bytes:
            raise TooLarge(None)
        parts.append(await reader.readexactly(n))
        await reader.readexactly(2)
