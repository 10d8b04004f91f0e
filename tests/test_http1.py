"""The lean HTTP/1.1 scrape path against real sockets on 127.0.0.1: lengths, chunks, keep-alive
(and a server that drops it), redirects and compressed pages handed to httpx, limits, garbage."""

from __future__ import annotations

import asyncio
import contextlib
import gzip

import httpx

from console.read.http1 import Http1
from console.read.scraper import scrape

PAGE = b"# TYPE x counter\nx_total 1\n"


async def serve(answers):
    """A server answering each request on a connection with the next of ``answers`` (bytes, or
    None to close the connection instead); counts connections."""
    seen = {"connections": 0, "requests": []}

    async def handle(reader, writer):
        seen["connections"] += 1
        try:
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                seen["requests"].append(head.decode())
                answer = answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/metrics", seen


def ok(body=PAGE, extra=b""):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def chunked(body=PAGE):
    half = len(body) // 2
    return (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n" % (half, body[:half])
        + b"%x;ext=1\r\n%s\r\n" % (len(body) - half, body[half:])
        + b"0\r\n\r\n"
    )


def test_lengths_chunks_and_keep_alive():
    async def go():
        server, url, seen = await serve([ok(), chunked(), ok()])
        lean = Http1()
        async with httpx.AsyncClient() as client:
            results = [
                await scrape(client, url, 2.0, headers={"Authorization": "Basic eDp5"}, lean=lean)
                for _ in range(3)
            ]
        await lean.aclose()
        server.close()
        return results, seen

    results, seen = asyncio.run(go())
    assert [r.text for r in results] == [PAGE.decode()] * 3 and not any(r.error for r in results)
    assert seen["connections"] == 1  # one kept-alive connection for the three scrapes
    first = seen["requests"][0]
    assert first.startswith("GET /metrics HTTP/1.1\r\n") and "Authorization: Basic eDp5" in first
    assert "Accept: text/plain;version=0.0.4" in first


def test_a_dropped_keep_alive_is_reopened_once():
    async def go():
        server, url, seen = await serve([ok(), None, ok()])
        lean = Http1()
        async with httpx.AsyncClient() as client:
            a = await scrape(client, url, 2.0, lean=lean)
            await asyncio.sleep(0.05)
            b = await scrape(client, url, 2.0, lean=lean)
        await lean.aclose()
        server.close()
        return a, b, seen

    a, b, seen = asyncio.run(go())
    assert a.text == b.text == PAGE.decode() and seen["connections"] == 2


def test_redirects_and_gzip_go_through_httpx():
    """/moved redirects to /metrics; /packed answers gzip even unasked: the lean path hands both
    to httpx, which follows and decodes them."""

    async def go():
        async def handle(reader, writer):
            try:
                while True:
                    head = (await reader.readuntil(b"\r\n\r\n")).decode()
                    path = head.split(" ")[1]
                    if path == "/moved":
                        writer.write(
                            b"HTTP/1.1 302 Found\r\nLocation: /metrics\r\nContent-Length: 0\r\n\r\n"
                        )
                    elif path == "/packed":
                        writer.write(ok(gzip.compress(PAGE), b"Content-Encoding: gzip\r\n"))
                    else:
                        writer.write(ok())
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        lean = Http1()
        async with httpx.AsyncClient(follow_redirects=True) as client:
            moved = await scrape(client, f"{base}/moved", 2.0, lean=lean)
            packed = await scrape(client, f"{base}/packed", 2.0, lean=lean)
            plain = await scrape(client, f"{base}/metrics", 2.0, lean=lean)
        await lean.aclose()
        server.close()
        return moved, packed, plain

    moved, packed, plain = asyncio.run(go())
    for r in (moved, packed, plain):
        assert r.text == PAGE.decode() and r.error is None


def test_limits_errors_and_garbage_are_one_sentence():
    async def go():
        out = []
        for answer in (
            ok(b"x" * 100),
            chunked(b"y" * 100),
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
        ):
            server, url, _ = await serve([answer])  # then the server hangs up
            lean = Http1()
            async with httpx.AsyncClient() as client:
                out.append(await scrape(client, url, 2.0, max_bytes=64, lean=lean))
            await lean.aclose()
            server.close()
        lean = Http1()
        async with httpx.AsyncClient() as client:
            out.append(await scrape(client, "http://127.0.0.1:9/metrics", 1.0, lean=lean))
        return out

    declared, chunks, failed, garbage, cut, refused = asyncio.run(go())
    assert declared.error.endswith("is 100 bytes, over the 64-byte limit")
    assert chunks.error.endswith("is over the 64-byte limit")
    assert failed.error.startswith("HTTP 500 from http://127.0.0.1:")
    assert "broke off or is not HTTP/1.1" in garbage.error
    assert "broke off or is not HTTP/1.1" in cut.error
    assert refused.error == (
        "connection refused at http://127.0.0.1:9/metrics (is the engine running on that port?)"
    )
    assert all(r.text is None for r in (declared, chunks, failed, garbage, cut, refused))


def test_closing_while_a_scrape_is_cancelled():
    """The console's exit cancels scrapes in flight and closes their connections at once: a
    cancelled scrape dropping its connection meanwhile must not break the close."""

    async def go():
        server, url, _ = await serve([ok(), ok()])
        lean = Http1()
        await lean.get(url, {}, 1024)  # one kept-alive connection

        async def never(reader, writer):
            await asyncio.sleep(3600)

        silent = await asyncio.start_server(never, "127.0.0.1", 0)
        silent_url = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}/metrics"
        task = asyncio.create_task(lean.get(silent_url, {}, 1024))
        await asyncio.sleep(0.05)
        task.cancel()
        await lean.aclose()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        server.close()
        silent.close()
        return lean._conns

    assert asyncio.run(go()) == {}


def test_trailers_close_http10_and_a_body_to_the_end_of_the_connection():
    """The framing edge cases: a chunked body with trailers keeps the connection; ``Connection:
    close`` and an HTTP/1.0 answer close it (the next scrape opens another); a 1xx answer first
    is skipped; a body with neither length nor chunks runs to the end of the connection."""
    trailers = chunked()[: -len(b"0\r\n\r\n")] + b"0\r\nX-Checksum: 1\r\n\r\n"
    answers = [
        trailers,
        ok(),  # on the same connection: the trailers were read to their end
        ok(extra=b"Connection: close\r\n"),
        b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE),
        b"HTTP/1.1 100 Continue\r\n\r\n" + ok(),
    ]

    async def to_eof(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + PAGE)
        await writer.drain()
        writer.close()

    async def go():
        server, url, seen = await serve(answers)
        lean = Http1()
        got = [await lean.get(url, {}, 1024) for _ in range(5)]
        eof = await asyncio.start_server(to_eof, "127.0.0.1", 0)
        port = eof.sockets[0].getsockname()[1]
        got.append(await lean.get(f"http://127.0.0.1:{port}/metrics", {}, 1024))
        left = [key[1] for key in lean._conns]
        await lean.aclose()
        server.close()
        eof.close()
        return got, seen, left, port

    got, seen, left, eof_port = asyncio.run(go())
    assert got == [(200, PAGE)] * 6
    # trailers + next + close on one; HTTP/1.0 on the second; 1xx on the third, kept alive
    assert seen["connections"] == 3
    assert len(left) == 1 and eof_port not in left  # the body to the end closed its connection


def test_a_body_cut_short_or_not_http_is_broken():
    async def go():
        out = []
        for answer in (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
            b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        ):

            async def once(reader, writer, answer=answer):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(answer)  # then hangs up
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(once, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
            lean = Http1()
            try:
                await asyncio.wait_for(lean.get(url, {}, 1024), 5)
                out.append(None)
            except ValueError as exc:
                out.append(type(exc).__name__)
            await lean.aclose()
            server.close()
        return out

    assert asyncio.run(go()) == ["Broken"] * 3
