"""Scrape engine /metrics pages: every endpoint concurrently, each with its own timeout."""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from console.read.http1 import Http1, TooLarge, Unsupported
from console.triton import top_models

if TYPE_CHECKING:  # httpx is imported when a page needs it (HTTPS, redirects, llama.cpp slots)
    import httpx

ACCEPT = "text/plain;version=0.0.4"
MAX_PAGE_BYTES = 16 * 1024 * 1024


class UrlError(ValueError):
    """A URL the user gave cannot be scraped; the message is one sentence."""


def check_url(url: str) -> str:
    """Return the URL if it is an http(s) URL with a host, else raise UrlError."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlError(
            f"{url!r} is not an http(s) URL; give one like http://127.0.0.1:8000/metrics."
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UrlError(
            f"{url!r} has an invalid port; give one like http://127.0.0.1:8000/metrics."
        ) from None
    return url


def without_credentials(url: str) -> tuple[str, dict[str, str] | None]:
    """Split ``user:password@`` out of a URL where it enters: the URL (from which names and every
    surface derive) keeps no secret; the credentials travel only as an Authorization header."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return clean, {"Authorization": f"Basic {token}"}


SECRET_PARAMS = frozenset(
    {"token", "key", "api_key", "apikey", "access_token", "auth", "password", "secret", "sig",
     "signature"}
)  # fmt: skip


def split_query_secrets(url: str) -> tuple[str, str | None]:
    """(the URL to show, the URL to fetch): secret-looking query parameters (``?token=``,
    ``?key=``, ...) keep their names but not their values in the URL every surface shows; the
    real URL is only fetched. (URL, None) when it holds none."""
    parts = urlsplit(url)
    if not parts.query:
        return url, None
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(k.lower() in SECRET_PARAMS for k, _ in pairs):
        return url, None
    shown = "&".join(
        f"{k}=***" if k.lower() in SECRET_PARAMS else urlencode([(k, v)]) for k, v in pairs
    )
    return urlunsplit(parts._replace(query=shown)), url


def query_secrets(url: str | None) -> list[str]:
    """The secret values in a URL's query, to mask verbatim wherever they might appear."""
    if not url:
        return []
    return [v for k, v in parse_qsl(urlsplit(url).query) if k.lower() in SECRET_PARAMS and v]


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    url: str
    text: str | None
    error: str | None
    elapsed_s: float
    taken_at: float  # time.time() when the answer arrived
    moved_to: str | None = None  # a redirect took the fetch to another host: where (no path)


def _refused(url: str) -> str:
    return f"connection refused at {url} (is the engine running on that port?)"


def _over(url: str, max_bytes: int, size: int | None = None) -> str:
    over = f"{size:,} bytes, over" if size else "over"
    return f"page at {url} is {over} the {max_bytes:,}-byte limit"


def _describe(exc: Exception, url: str, timeout: float) -> str:
    httpx = sys.modules.get("httpx")  # not loaded: the error is not one of its own
    if httpx is None:
        return f"{exc.__class__.__name__} while reading {url}: {exc}"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {url} within {timeout:g} s"
    if isinstance(exc, httpx.ConnectError):
        cause = str(exc) or "connection failed"
        chain: BaseException | None = exc
        refused = False
        while chain is not None:
            refused = (
                refused
                or isinstance(chain, ConnectionRefusedError)
                or "refused" in str(chain).lower()
            )
            chain = chain.__cause__ or chain.__context__
        if refused:
            return _refused(url)
        return f"cannot connect to {url}: {cause}"
    if isinstance(exc, httpx.HTTPError):
        return f"HTTP error from {url}: {exc.__class__.__name__}: {exc}"
    return f"{exc.__class__.__name__} while reading {url}: {exc}"


async def scrape(
    client: httpx.AsyncClient | Callable[[], httpx.AsyncClient],
    url: str,
    timeout: float = 2.0,
    max_bytes: int = MAX_PAGE_BYTES,
    headers: dict[str, str] | None = None,
    lean: Http1 | None = None,
) -> ScrapeResult:
    """One page. ``lean`` reads plain-http pages over its own kept-alive connections (httpx
    reads the rest: HTTPS, redirects, compressed pages); ``client`` may be a function making the
    httpx client, so an engine that lean serves never has one."""
    start = time.perf_counter()
    req_headers = {"Accept": ACCEPT, **(headers or {})}

    moved: list[str] = []

    def result(text: str | None, error: str | None) -> ScrapeResult:
        return ScrapeResult(
            url, text, error, time.perf_counter() - start, time.time(), moved[0] if moved else None
        )

    try:
        async with asyncio.timeout(timeout):
            if lean is not None and url.startswith("http://"):
                try:
                    status, body = await lean.get(url, req_headers, max_bytes)
                except Unsupported:
                    pass  # a redirect or a compressed page: httpx below reads it
                except TooLarge as big:
                    return result(None, _over(url, max_bytes, big.size))
                except ConnectionRefusedError:
                    return result(None, _refused(url))
                except OSError as exc:
                    return result(None, f"cannot connect to {url}: {exc.strerror or exc}")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                    return result(None, f"the answer from {url} broke off or is not HTTP/1.1")
                else:
                    if status != 200:
                        return result(None, f"HTTP {status} from {url}")
                    return result(body.decode("utf-8", errors="replace"), None)
            if callable(client):
                client = client()
            async with client.stream("GET", url, headers=req_headers, timeout=timeout) as resp:
                final = urlsplit(str(resp.url))
                if final.netloc != urlsplit(url).netloc:  # followed to another host: said
                    moved.append(f"{final.scheme}://{final.netloc}")
                if resp.status_code != 200:
                    return result(None, f"HTTP {resp.status_code} from {url}")
                declared = resp.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    return result(None, _over(url, max_bytes, int(declared)))
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        return result(None, _over(url, max_bytes))
                    chunks.append(chunk)
                body = b"".join(chunks)
    except TimeoutError:
        return result(None, f"no answer from {url} within {timeout:g} s")
    except Exception as exc:  # noqa: BLE001 - every failure becomes a per-engine error
        return result(None, _describe(exc, url, timeout))
    return result(body.decode("utf-8", errors="replace"), None)


async def fetch_top_models(
    client: httpx.AsyncClient, base: str, timeout_s: float, headers: dict[str, str] | None = None
) -> list[str] | None:
    """Triton's top-level models (those no ensemble calls), from its repository index and model
    configuration API, or None when it cannot be read."""
    import httpx  # loaded already: ``client`` is one of its clients

    try:
        res = await client.post(
            f"{base}/v2/repository/index", json={}, timeout=timeout_s, headers=headers
        )
        res.raise_for_status()
        index = res.json()
        configs = {}
        for m in index:
            name = m.get("name")
            if name:
                r = await client.get(
                    f"{base}/v2/models/{name}/config", timeout=timeout_s, headers=headers
                )
                if r.status_code == 200:
                    configs[name] = r.json()
        tops = top_models(index, configs)
        return tops or None
    except (httpx.HTTPError, ValueError, TypeError, AttributeError):
        return None
