"""Where ``inferdeck export`` listens and who may read it: the --listen address, whether it is
this machine only, and the server (console/out/textserver.py) serving the newest page at /metrics.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Callable

from console.out.textserver import TextServer

MAX_CONNECTIONS = 64
TIMEOUT_S = 10.0


class ListenError(ValueError):
    """A --listen value that cannot be served; the message is one sentence."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port), or ListenError."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ListenError(f"--listen {text}: give HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464.")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ListenError(f"--listen {text}: the port must be 1-65535, not {port}.")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ListenError(
                f"--listen {text}: an IPv6 address goes in brackets, e.g. [::1]:9464."
            )
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ListenError(f"--listen {text}: {host!r} is not an IPv6 address.") from None
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


VERDICT_PATH = "/verdict.json"
HEALTH_PATH = "/healthz"  # without the token: a kubelet's probe has none, and it tells no figure


def serve(
    address: tuple[str, int],
    page: Callable[[], str],
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
    timeout_s: float = TIMEOUT_S,
    verdict: Callable[[], str] | None = None,
    health: Callable[[], str] | None = None,
) -> TextServer:
    """Start serving ``page()`` at /metrics on a daemon thread; returns the server (stop()).
    ``verdict()``: the newest frame as JSON at /verdict.json, which `inferdeck check` reads;
    ``health()``: whether the polls go on, at /healthz for anyone (raises Unavailable: 503)."""
    paths: dict[str, tuple[Callable[[], str | bytes], str]] = {
        "/metrics": (page, "text/plain; version=0.0.4; charset=utf-8")
    }
    if verdict is not None:
        paths[VERDICT_PATH] = (verdict, "application/json")
    if health is not None:
        paths[HEALTH_PATH] = (health, "text/plain; charset=utf-8")
    return TextServer(
        address,
        paths,
        token=token,
        tls=tls,
        max_connections=max_connections,
        timeout_s=timeout_s,
        not_found=b"inferdeck export serves /metrics\n",
        open_paths=frozenset({HEALTH_PATH}),
    ).start()
