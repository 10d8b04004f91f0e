"""A client of Prometheus' HTTP API: instant and range queries, each failing on its own with one
sentence naming the URL."""

from __future__ import annotations

import math
from typing import Any

import httpx


class PromError(Exception):
    """A query failed; the message is one sentence with the URL."""


class PromClient:
    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        verify: bool = True,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = headers or {}
        self.timeout_s = timeout_s
        # what the backend said it left out (Thanos, federation, a Prometheus at its limits:
        # "partial response ..."), gathered over the answers since the caller last cleared them
        self.warnings: set[str] = set()
        self._client = httpx.AsyncClient(verify=verify, headers=self.headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.url}{path}"
        try:
            resp = await self._client.get(url, params=params, timeout=self.timeout_s)
        except httpx.TimeoutException:
            raise PromError(
                f"Prometheus at {self.url} gave no answer within {self.timeout_s:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise PromError(
                f"cannot reach Prometheus at {self.url} ({type(exc).__name__})"
            ) from None
        try:
            doc = resp.json()
        except ValueError:
            raise PromError(
                f"{url} did not answer with JSON (HTTP {resp.status_code}): is this Prometheus?"
            ) from None
        if doc.get("status") != "success":
            raise PromError(f"Prometheus refused the query: {doc.get('error', resp.status_code)}")
        for w in doc.get("warnings") or []:
            self.warnings.add(str(w))
        data: dict[str, Any] = doc["data"]
        return data

    async def alerts(self) -> list[dict[str, Any]]:
        """The alerts Prometheus' rules hold now (pending and firing), with ``activeAt``."""
        data = await self._get("/api/v1/alerts", {})
        got = data.get("alerts", [])
        return [a for a in got if isinstance(a, dict)] if isinstance(got, list) else []

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
