"""Hard to knock over: the exporter under hostile clients, engines that lie, files that break.
Each defect of the security and reliability pass as a test (issue: hard to knock over)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from console.exportserver import ListenError, parse_listen, serve, token_ok


def _port(server) -> int:
    return server.server_address[1]


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
         "/CN=127.0.0.1", "-keyout", str(d / "k.pem"), "-out", str(d / "c.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "c.pem", d / "k.pem")
    return ctx


def test_a_silent_tls_client_does_not_delay_an_https_scrape(cert):
    server = serve(("127.0.0.1", 0), lambda: "x 1\n", tls=cert, timeout_s=5.0)
    try:
        silent = socket.create_connection(("127.0.0.1", _port(server)))  # connects, says nothing
        time.sleep(0.2)
        began = time.monotonic()
        r = httpx.get(f"https://127.0.0.1:{_port(server)}/metrics", verify=False, timeout=3)
        assert r.status_code == 200 and r.text == "x 1\n"
        assert time.monotonic() - began < 1.0
        silent.close()
    finally:
        server.shutdown()


def test_fifty_concurrent_scrapers_all_answer_under_a_second():
    page = "inferdeck_x 1\n" * 2000
    server = serve(("127.0.0.1", 0), lambda: page)
    url = f"http://127.0.0.1:{_port(server)}/metrics"
    worst = [0.0]
    count = [0]
    end = time.monotonic() + 30

    def scraper() -> None:
        with httpx.Client() as c:
            while time.monotonic() < end:
                began = time.monotonic()
                r = c.get(url, timeout=10)
                assert r.status_code == 200
                worst[0] = max(worst[0], time.monotonic() - began)
                count[0] += 1
                time.sleep(0.2)

    try:
        with ThreadPoolExecutor(50) as pool:
            for f in [pool.submit(scraper) for _ in range(50)]:
                f.result()
    finally:
        server.shutdown()
    assert count[0] > 50 * 30  # every scraper kept scraping
    assert worst[0] < 1.0, worst[0]


def test_a_thousand_idle_connections_are_closed_by_their_timeout():
    server = serve(("127.0.0.1", 0), lambda: "x 1\n", timeout_s=1.0)
    before = threading.active_count()
    socks = [socket.create_connection(("127.0.0.1", _port(server))) for _ in range(1000)]
    try:
        time.sleep(0.5)
        assert threading.active_count() - before <= 64 + 2  # the cap: the rest closed at once
        time.sleep(2.0)
        assert threading.active_count() - before <= 2  # idle ones timed out
        r = httpx.get(f"http://127.0.0.1:{_port(server)}/metrics", timeout=3)
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()
        server.shutdown()


def test_the_token_scheme_is_case_insensitive_and_compared_whole():
    assert token_ok("Bearer s3cret", "s3cret") and token_ok("bearer s3cret", "s3cret")
    assert token_ok("BEARER  s3cret ", "s3cret")
    assert not token_ok("Bearer s3cre", "s3cret") and not token_ok("Basic s3cret", "s3cret")
    assert not token_ok(None, "s3cret") and not token_ok("", "s3cret")


@pytest.mark.parametrize(
    "text,want",
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9464", ("::1", 9464)),
     ("0.0.0.0:1", ("0.0.0.0", 1))],
)  # fmt: skip
def test_listen_addresses(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["127.0.0.1:99999", "nowhere", "[::1:9464", "[zz]:80", ":80"])
def test_bad_listen_addresses_are_one_sentence(text):
    with pytest.raises(ListenError) as exc:
        parse_listen(text)
    assert str(exc.value).startswith("--listen ") and str(exc.value).endswith(".")


def test_ipv6_loopback_is_served():
    try:
        server = serve(("::1", 0), lambda: "x 1\n")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert httpx.get(f"http://[::1]:{_port(server)}/metrics", timeout=3).text == "x 1\n"
    finally:
        server.shutdown()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    from tests.conftest import ROOT

    return subprocess.run(
        [sys.executable, "-m", "console", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_export_beyond_loopback_needs_a_token_or_insecure():
    res = _cli("export", "--no-gpu", "--no-discover", "--listen", "0.0.0.0:9")
    assert res.returncode == 2 and "without a token" in res.stderr and "--insecure" in res.stderr
    res = _cli("export", "--no-gpu", "--no-discover", "--listen", "127.0.0.1:99999")
    assert res.returncode == 2 and "1-65535" in res.stderr and "Traceback" not in res.stderr
