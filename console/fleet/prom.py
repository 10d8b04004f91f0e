"""A client of Prometheus' HTTP API: instant and range queries, each failing on its own with one
sentence naming the URL."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any
from urllib.parse import urlsplit

import httpx


class PromError(Exception):
    """A query failed; the message is one sentence with the URL."""


MAX_ANSWER_BYTES = 8 * 1024 * 1024  # one answer, read while it streams (2,000 nodes need ~1 MiB)
MAX_SERIES = 10_000  # series kept from one query's answer; the rest left out, and said so


def _retry_after(header: str | None) -> float:
    try:
        return min(2.0, max(0.0, float(header))) if header else 0.5
    except ValueError:
        return 0.5


def _status_sentence(url: str, status: int, body: str, resp: httpx.Response | None = None) -> str:
    """What a non-JSON answer means, by its status (a redirect: where to, never followed)."""
    if 300 <= status < 400 and resp is not None:
        to = urlsplit(str(resp.headers.get("Location", "")))
        where = to.netloc or urlsplit(url).netloc
        return (
            f"{url}: it redirects (HTTP {status}) to {to.scheme + '://' if to.scheme else ''}"
            f"{where}{to.path}; redirects are not followed (credentials would go with them): "
            "give that URL"
        )
    said = body.strip().splitlines()[0][:160] if body.strip() else ""
    why = {
        401: "it wants credentials (prometheus.token_file, or user:password in the URL)",
        403: "the credentials given are not allowed to query",
        404: "no Prometheus API at this path (VictoriaMetrics cluster: /select/<tenant>/prometheus)",
        422: "the query could not be executed (HTTP 422)",
        429: "too many queries: the backend asks to slow down (prometheus.concurrency)",
        503: "the backend is overloaded or starting (HTTP 503: over its concurrent-query "
        "limit? lower prometheus.concurrency)",
    }.get(status)
    if why is None:
        why = f"not the Prometheus API's JSON (HTTP {status}): is this Prometheus?"
    return f"{url}: {why}" + (f" — it said: {said}" if said else "")


class PromClient:
    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        params: list[tuple[str, str]] | None = None,
        verify: bool = True,
        timeout_s: float = 10.0,
        concurrency: int = 4,
    ) -> None:
        self.url = url.rstrip("/")  # no query string: it is in messages
        self.params: list[tuple[str, Any]] = list(params or [])  # the URL's query, each call
        self.headers = headers or {}
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self._gate: asyncio.Semaphore | None = None  # made in the loop that first queries
        self._broken: tuple[float, str] | None = None  # when it last gave no answer, and why
        self._round: float | None = None  # when the caller's round of calls began (begin_round)
        # what the backend said it left out (Thanos, federation, a Prometheus at its limits:
        # "partial response ..."), gathered over the answers since the caller last cleared them
        self.warnings: set[str] = set()
        self._client = httpx.AsyncClient(verify=verify, headers=self.headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        """One API call, at most ``concurrency`` at once; an overloaded backend (HTTP 503 or 429:
        VictoriaMetrics answers 503 past its concurrent-query limit) is asked once more after
        its Retry-After (up to 2 s)."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.concurrency)
        url = f"{self.url}{path}"
        queued = time.monotonic()
        async with self._gate:
            # the backend stopped answering since this call was queued: it fails at once with
            # the same sentence rather than wait its own timeout behind the others (a poll of
            # 38 queries, 4 at a time, would otherwise take ten timeouts to say so)
            since = queued if self._round is None else min(queued, self._round)
            if self._broken is not None and self._broken[0] >= since:
                raise PromError(self._broken[1])
            try:
                resp = await self._send(url, params)
                if resp.status_code in (429, 503):
                    await asyncio.sleep(_retry_after(resp.headers.get("Retry-After")))
                    resp = await self._send(url, params)
            except PromError as exc:
                self._broken = (time.monotonic(), str(exc))
                raise
            self._broken = None
        try:
            doc = resp.json()
        except ValueError:
            raise PromError(_status_sentence(url, resp.status_code, resp.text, resp)) from None
        if not isinstance(doc, dict):
            raise PromError(f"{url} answered JSON that is not the Prometheus API's")
        if doc.get("status") != "success":
            why = doc.get("error") or _status_sentence(url, resp.status_code, "")
            raise PromError(
                f"Prometheus refused the query (HTTP {resp.status_code}"
                + (f", {doc['errorType']}" if doc.get("errorType") else "")
                + f"): {why}"
            )
        for w in doc.get("warnings") or []:
            self.warnings.add(str(w))
        data: dict[str, Any] = doc["data"]
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, list) and len(result) > MAX_SERIES:
            self.warnings.add(
                f"a query answered {len(result):,} series; the first {MAX_SERIES:,} were read "
                f"and {len(result) - MAX_SERIES:,} left out ({params.get('query', path)})"[:300]
            )
            data = {**data, "result": result[:MAX_SERIES]}
        return data

    def begin_round(self) -> None:
        """A new round of calls (a fleet poll): asked afresh; within it, once the backend gave
        no answer, every later call fails at once with that sentence (a poll's phases would
        otherwise each wait a whole timeout)."""
        self._round = time.monotonic()

    @property
    def broken(self) -> bool:
        """The last call got no answer at all (a timeout, a refused connection)."""
        return self._broken is not None

    async def _send(self, url: str, params: dict[str, Any]) -> httpx.Response:
        """One call, whole within ``timeout_s`` (a trickling answer cannot stretch it: the limit
        is on the call, not on each read), its body read as it streams up to MAX_ANSWER_BYTES."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._client.stream(
                    "GET", url, params=[*self.params, *params.items()], timeout=self.timeout_s
                ) as resp:
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():  # decoded: a gzip bomb counts whole
                        body += chunk
                        if len(body) > MAX_ANSWER_BYTES:
                            raise PromError(
                                f"Prometheus at {self.url} answered more than "
                                f"{MAX_ANSWER_BYTES >> 20} MiB for one query; it was left "
                                "unread (narrow the fleet with prometheus.match, or record its "
                                "figures with `inferdeck rules --fleet`)"
                            )
                    headers = {
                        k: v
                        for k, v in resp.headers.items()
                        if k.lower() not in ("content-encoding", "content-length")
                    }
                    return httpx.Response(
                        resp.status_code, headers=headers, content=bytes(body), request=resp.request
                    )
        except TimeoutError:
            raise PromError(
                f"Prometheus at {self.url} gave no answer within {self.timeout_s:g} s (a whole "
                "answer: the query is slower than the timeout, or it trickles: raise "
                "prometheus.timeout_s, or record the fleet's figures with rules)"
            ) from None
        except httpx.TimeoutException:
            raise PromError(
                f"Prometheus at {self.url} gave no answer within {self.timeout_s:g} s (the "
                "query is slower than the timeout: raise prometheus.timeout_s, or record the "
                "fleet's figures with rules)"
            ) from None
        except httpx.HTTPError as exc:
            raise PromError(
                f"cannot reach Prometheus at {self.url} ({type(exc).__name__})"
            ) from None

    async def alerts(self) -> list[dict[str, Any]]:
        """The alerts Prometheus' rules hold now (pending and firing), with ``activeAt``."""
        data = await self._get("/api/v1/alerts", {})
        got = data.get("alerts", [])
        return [a for a in got if isinstance(a, dict)] if isinstance(got, list) else []

    async def status(self, what: str) -> dict[str, Any]:
        """/api/v1/status/<what> (buildinfo, active_queries, ...)."""
        data = await self._get(f"/api/v1/status/{what}", {})
        return data if isinstance(data, dict) else {}

    async def probe(self, path: str) -> int | None:
        """The HTTP status a path answers with (None: no answer), body unread."""
        try:
            resp = await self._client.get(
                f"{self.url}{path}", params=self.params, timeout=self.timeout_s
            )
        except httpx.HTTPError:
            return None
        return resp.status_code

    async def rules(self) -> list[dict[str, Any]]:
        """The alerting rule groups the backend (or the ruler behind it) evaluates."""
        data = await self._get("/api/v1/rules", {"type": "alert"})
        got = data.get("groups", []) if isinstance(data, dict) else []
        return [g for g in got if isinstance(g, dict)] if isinstance(got, list) else []

    async def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (labels, health, ``scrapeInterval``) as the backend lists them."""
        data = await self._get("/api/v1/targets", {"state": "active"})
        got = data.get("activeTargets", []) if isinstance(data, dict) else []
        return [t for t in got if isinstance(t, dict)] if isinstance(got, list) else []

    async def query(self, q: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        params = {"query": q} if at is None else {"query": q, "time": at}
        data = await self._get("/api/v1/query", params)
        out = []
        for r in data.get("result", []):
            try:
                value = float(r["value"][1])
            except (KeyError, ValueError, TypeError, IndexError):
                continue
            if math.isfinite(value):  # NaN (a quantile of nothing) or Inf: n/a, never a figure
                out.append((r["metric"], value))
        return out

    async def query_range(
        self, q: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, Any], list[Any]]]:
        data = await self._get(
            "/api/v1/query_range", {"query": q, "start": start, "end": end, "step": step}
        )
        out = []
        for r in data.get("result", []):
            points = []
            for t, v in r.get("values", []):
                try:
                    point = (float(t), float(v))
                except (ValueError, TypeError):
                    continue
                if math.isfinite(point[1]):
                    points.append(point)
            out.append((r["metric"], points))
        return out
