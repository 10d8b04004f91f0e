"""SLO rules from the engines' own series (console/out/slorules.py): the seed SLOs (p95 TTFT 1 s,
p95 TPOT 50 ms, 99.5 % completion) on a vLLM, an SGLang and a TensorRT-LLM engine, checked
against PromQL written here by hand for the same SLI; `promtool check rules` and the generated
`promtool test rules` pass, and a broken expectation fails them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from console.out.slorules import rule_groups, rule_tests, to_yaml
from console.settings import Settings

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SEED = {"ttft_s": 1.0, "tpot_s": 0.05, "completion": 0.995}


def _service(name: str, **where: object) -> dict:
    """A planned 8B service at the seed SLOs; ``where``: its engine (or replicas) and device."""
    return {
        "name": name,
        "model": "llama-3.1-8b",
        "weight_bits": 16,
        "device": "0",
        "tokens_per_sequence": 8192,
        "concurrent_sequences": 8,
        "slo": SEED,
        **where,
    }


def _settings() -> Settings:
    def svc(name: str, engine: str, gpu: str) -> dict:
        return _service(name, engine=engine, device=gpu)

    return Settings.model_validate(
        {
            "engines": [
                {"name": "v", "url": "http://10.0.0.5:8000/metrics", "kind": "vllm"},
                {"name": "s", "url": "http://10.0.0.6:30000/metrics", "kind": "sglang"},
                {"name": "t", "url": "http://10.0.0.7:8000/prometheus/metrics", "kind": "trtllm"},
            ],
            "services": [svc("vchat", "v", "0"), svc("schat", "s", "1"), svc("tchat", "t", "2")],
        }
    )


def _records(window: str) -> dict[tuple[str, str], str]:
    doc, _ = rule_groups(_settings())
    return {
        (r["labels"]["service"], r["labels"]["slo"]): r["expr"]
        for g in doc["groups"]
        for r in g["rules"]
        if r.get("record") == f"inferdeck:slo_errors:ratio_rate{window}"
    }


# written by hand from each engine's metric definitions (vLLM's loggers.py, SGLang's collector,
# TensorRT-LLM's serve metrics): the bad share of the SLI over 5 minutes
HAND = {
    ("vchat", "completion"): 'sum(rate(vllm:request_success_total{instance="10.0.0.5:8000",'
    'finished_reason=~"stop|length|repetition"}[5m])) / sum(rate(vllm:request_success_total'
    '{instance="10.0.0.5:8000",finished_reason!~"abort"}[5m]))',
    ("vchat", "ttft"): 'sum(rate(vllm:time_to_first_token_seconds_bucket{instance="10.0.0.5:8000",'
    'le=~"1|1\\\\.0"}[5m])) / sum(rate(vllm:time_to_first_token_seconds_count'
    '{instance="10.0.0.5:8000"}[5m]))',
    ("vchat", "tpot"): "sum(rate(vllm:request_time_per_output_token_seconds_bucket"
    '{instance="10.0.0.5:8000",le="0.05"}[5m])) / sum(rate('
    'vllm:request_time_per_output_token_seconds_count{instance="10.0.0.5:8000"}[5m]))',
    # SGLang's TTFT edges hold 1.0; its TPOT edges (ITL's) jump 0.040 -> 0.060: read at 0.04
    ("schat", "ttft"): "sum(rate(sglang:time_to_first_token_seconds_bucket"
    '{instance="10.0.0.6:30000",le=~"1|1\\\\.0"}[5m])) / sum(rate('
    'sglang:time_to_first_token_seconds_count{instance="10.0.0.6:30000"}[5m]))',
    ("schat", "tpot"): "sum(rate(sglang:request_time_per_output_token_seconds_bucket"
    '{instance="10.0.0.6:30000",le="0.04"}[5m])) / sum(rate('
    'sglang:request_time_per_output_token_seconds_count{instance="10.0.0.6:30000"}[5m]))',
    ("tchat", "completion"): 'sum(rate(trtllm_request_success_total{instance="10.0.0.7:8000",'
    'finished_reason=~"stop|length"}[5m])) / sum(rate(trtllm_request_success_total'
    '{instance="10.0.0.7:8000",finished_reason!~"cancelled"}[5m]))',
    ("tchat", "ttft"): "sum(rate(trtllm_time_to_first_token_seconds_bucket"
    '{instance="10.0.0.7:8000",le=~"1|1\\\\.0"}[5m])) / sum(rate('
    'trtllm_time_to_first_token_seconds_count{instance="10.0.0.7:8000"}[5m]))',
    ("tchat", "tpot"): "sum(rate(trtllm_time_per_output_token_seconds_bucket"
    '{instance="10.0.0.7:8000",le="0.05"}[5m])) / sum(rate('
    'trtllm_time_per_output_token_seconds_count{instance="10.0.0.7:8000"}[5m]))',
}


def test_the_seed_slos_match_hand_written_promql_on_three_engines():
    got = _records("5m")
    assert set(got) == set(HAND)  # SGLang's completion is left out: it counts no failures
    for key, good_share in HAND.items():
        good, every = good_share.split(" / ")
        # bad requests over all of them, no sample when none arrived (0/0 is NaN); a completion
        # with no good finish at all has every request bad
        bad = (
            f"{every} - ({good} or {every} * 0)" if key[1] == "completion" else f"{every} - {good}"
        )
        if key[1] == "completion":
            assert got[key] == f"(({bad}) / (({every}) > 0))", key
        else:
            # the bucket is read as the largest of the engine's edges up to the bound (the one at
            # the bound where it is an edge); its value is checked in promtool on every profile
            edge = good.split("le=")[1].split('"')[1].split("|")[-1].replace("\\\\", "")
            assert f"{every} - max(sum by (le) (rate(" in got[key], key
            top = got[key].split('le=~"')[1].split('"')[0].replace("\\\\", "").split("|")
            assert max(map(float, top)) == float(edge), key
    assert _records("3d")[("vchat", "ttft")] == got[("vchat", "ttft")].replace("[5m]", "[3d]")
    _, skipped = rule_groups(_settings())
    assert skipped == [
        "schat completion: its engine counts no failed requests (finished minus aborted only), "
        "so there is no completion SLI to write"
    ]


def test_an_slo_between_bucket_edges_says_which_edge_and_which_way():
    doc, _ = rule_groups(_settings())
    page = {
        (a["labels"]["service"], a["labels"]["slo"]): a
        for g in doc["groups"]
        for a in g["rules"]
        if a.get("alert") == "InferdeckSLOBurnPage"
    }
    assert "read at le=0.04" in page[("schat", "tpot")]["annotations"]["description"]
    assert "misses overstated" in page[("schat", "tpot")]["annotations"]["description"]
    assert (
        "le=0.05 is a bucket edge: exact" in page[("vchat", "tpot")]["annotations"]["description"]
    )
    a = page[("vchat", "ttft")]
    assert a["labels"] == {
        "severity": "critical",
        "asks": "page",
        "instance": "10.0.0.5:8000",  # where it runs: the fleet puts it on that node's row
        "service": "vchat",
        "slo": "ttft",
    }
    # the workbook's pairs, 14.4x over 1h and 5m and 6x over 6h and 30m, against 1 - 0.95; but
    # 14.4 x 5 % = 72 % of an hour bad would leave a total outage unpaged for 43 minutes, so a
    # p95 objective pages over 1h and 5m at 1/12 of requests bad (5 minutes of a total outage)
    assert "ratio_rate1h{" in a["expr"] and "> (1.66667 * 0.05)" in a["expr"]
    assert "ratio_rate30m{" in a["expr"] and "> (6 * 0.05)" in a["expr"]
    assert "pages in about 5.0 min" in a["annotations"]["description"]
    done = page[("vchat", "completion")]  # 99.5 %: 14.4 x 0.5 % = 7.2 % of an hour, 4.3 min
    assert "> (14.4 * 0.005)" in done["expr"]
    assert "pages in about 4.3 min" in done["annotations"]["description"]
    remaining = [
        r
        for g in doc["groups"]
        for r in g["rules"]
        if r.get("record") == "inferdeck:slo_error_budget:remaining"
        and r["labels"]["service"] == "vchat"
        and r["labels"]["slo"] == "completion"
    ]
    # by events: the period's bad requests over all of them, against the budget
    assert remaining[0]["expr"] == (
        "1 - (sum_over_time(inferdeck:slo_bad_requests:rate5m"
        '{service="vchat",slo="completion"}[28d]) / (sum_over_time(inferdeck:slo_requests:rate5m'
        '{service="vchat",slo="completion"}[28d]) > 0)) / 0.005'
    )


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules_and_passes_the_generated_tests(tmp_path):
    if not os.access(PROMTOOL, os.X_OK):
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    settings = _settings()
    for fmt in ("rules",):
        doc, skipped = rule_groups(settings)
        (tmp_path / "inferdeck-slo.yaml").write_text(to_yaml(doc, skipped, fmt))
    tests = rule_tests(settings, "inferdeck-slo.yaml")
    assert len(tests["tests"]) == 2 * len(HAND)  # a healthy hour and a missing one each
    (tmp_path / "slo_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    checked = _promtool("check", "rules", "inferdeck-slo.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = _promtool("test", "rules", "slo_test.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # a test that cannot fail proves nothing: the missing hour made healthy must fail it
    for t in tests["tests"]:
        for s in t["input_series"]:
            s["values"] = s["values"].replace("0+54x", "0+0x")
    (tmp_path / "broken_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    broken = _promtool("test", "rules", "broken_test.yaml", cwd=tmp_path)
    assert broken.returncode != 0 and "InferdeckSLOBurnPage" in broken.stdout + broken.stderr


def test_the_prometheus_operator_resource_wraps_the_same_groups():
    doc, skipped = rule_groups(_settings())
    res = yaml.safe_load(to_yaml(doc, skipped, "prometheusrule"))
    assert res["apiVersion"] == "monitoring.coreos.com/v1" and res["kind"] == "PrometheusRule"
    assert res["spec"] == doc


PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_latency_miss_pages_through_a_real_prometheus_and_alertmanager(tmp_path):
    """A simulated vLLM whose prefill is too slow for its 1 s TTFT SLO (no error, no abort), its
    last 90 minutes in a real Prometheus (backfilled) with the generated rules, a real
    Alertmanager routing to a webhook on 127.0.0.1: the page alert arrives, and it is still
    firing from the same moment after `inferdeck export` is stopped and started again (the rules
    read the engine, not it)."""
    import http.server
    import json
    import sys
    import textwrap
    import threading
    import time
    import urllib.parse
    import urllib.request

    from console.sim.engine import TrafficSpec, start_engine

    for tool in (PROMETHEUS, ALERTMANAGER):
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is not installed (.ci/run installs prometheus, alertmanager)")
    eng = start_engine(
        "vllm", TrafficSpec(rate_rps=0.5, prompt_tokens=900, prefill_tok_s=300.0, seed=4)
    )
    got: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    cfg = tmp_path / "inferdeck.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "discover": False,
                "engines": [
                    {
                        "name": "v",
                        "url": f"http://127.0.0.1:{eng.server.port}/metrics",
                        "kind": "vllm",
                    }
                ],
                # e2e 12 s lies between vLLM's edges 10 and 15: read at 10, never an empty series
                "services": [_service("chat", engine="v", slo={**SEED, "e2e_s": 12.0})],
            }
        )
    )
    settings = Settings.model_validate(yaml.safe_load(cfg.read_text()))
    doc, skipped = rule_groups(settings)
    (tmp_path / "slo.yaml").write_text(to_yaml(doc, skipped))
    # the engine's last 90 minutes, as Prometheus would hold them had it scraped it all along
    # (every request over its 1 s TTFT): a page waits for its 1h window to hold data
    from tests.promhist import backfill

    where = {"instance": f"127.0.0.1:{eng.server.port}", "job": "engines", "model_name": "m"}
    ts = [time.time() - 15 * i for i in range(360, 0, -1)]
    backfill(
        tmp_path / "data",
        {
            "vllm:time_to_first_token_seconds_bucket": [
                ({**where, "le": le}, [(t, n * i) for i, t in enumerate(ts)])
                for le, n in (("1.0", 0), ("2.5", 2), ("+Inf", 2))
            ],
            "vllm:time_to_first_token_seconds_count": [
                (where, [(t, 2 * i) for i, t in enumerate(ts)])
            ],
            # half the requests between 10 and 15 s: late against 12 s as read at the 10 edge
            "vllm:e2e_request_latency_seconds_bucket": [
                ({**where, "le": le}, [(t, n * i) for i, t in enumerate(ts)])
                for le, n in (("10.0", 1), ("15.0", 2), ("+Inf", 2))
            ],
            "vllm:e2e_request_latency_seconds_count": [
                (where, [(t, 2 * i) for i, t in enumerate(ts)])
            ],
        },
    )
    am_port, prom_port, ex_port = _free_port(), _free_port(), _free_port()
    (tmp_path / "am.yml").write_text(
        textwrap.dedent(f"""\
        route:
          receiver: hook
          group_by: [alertname, service, slo]
          group_wait: 1s
          group_interval: 1s
        receivers:
          - name: hook
            webhook_configs:
              - url: http://127.0.0.1:{hook.server_address[1]}/hook
        """)
    )
    (tmp_path / "prometheus.yml").write_text(
        textwrap.dedent(f"""\
        global:
          scrape_interval: 1s
          evaluation_interval: 1s
        rule_files: [slo.yaml]
        alerting:
          alertmanagers:
            - static_configs:
                - targets: ['127.0.0.1:{am_port}']
        scrape_configs:
          - job_name: engines
            static_configs:
              - targets: ['127.0.0.1:{eng.server.port}']
          - job_name: inferdeck
            static_configs:
              - targets: ['127.0.0.1:{ex_port}']
        """)
    )
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    am = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={tmp_path / 'am.yml'}",
         f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
         "--cluster.listen-address="],
        **quiet,
    )  # fmt: skip
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        cwd=tmp_path,
        **quiet,
    )  # fmt: skip

    def export() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "console", "export", "--config", str(cfg),
             "--listen", f"127.0.0.1:{ex_port}"],
            cwd=Path(__file__).resolve().parent.parent,
            **quiet,
        )  # fmt: skip

    def firing() -> list[dict]:
        url = f"http://127.0.0.1:{prom_port}/api/v1/alerts"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                alerts = json.load(r)["data"]["alerts"]
        except OSError:
            return []
        return [
            a
            for a in alerts
            if a["labels"].get("alertname") == "InferdeckSLOBurnPage"
            and a["labels"].get("slo") == "ttft"
            and a["state"] == "firing"
        ]

    exporter = export()
    try:
        deadline = time.time() + 150

        def pages() -> list[dict]:
            return [
                a
                for m in got
                for a in m.get("alerts", [])
                if a["labels"].get("alertname") == "InferdeckSLOBurnPage"
                and a["labels"].get("slo") == "ttft"
            ]

        while time.time() < deadline and not pages():
            time.sleep(1)
        assert pages(), "no TTFT page reached the Alertmanager's receiver"
        page = pages()[0]
        assert page["status"] == "firing"
        assert page["labels"]["service"] == "chat" and page["labels"]["slo"] == "ttft"
        assert page["labels"]["severity"] == "critical"
        assert "bad over the long window" in page["annotations"]["summary"]
        before = firing()
        assert before, "Prometheus does not list the page as firing"
        # the fleet view reads the same state from Prometheus: alert, activeAt, budget left
        import asyncio

        from console.fleet.prom import PromClient
        from console.fleet.source import FleetSource, _timestamp

        async def fleet_slo() -> list:
            src = FleetSource(PromClient(f"http://127.0.0.1:{prom_port}"))
            try:
                return (await src.poll()).slo
            finally:
                await src.aclose()

        # the budget's recording rule is evaluated on its own interval, after the alert's: asked
        # again for a few seconds (a loaded two-core run once read it before it was recorded)
        for _ in range(20):
            rows = {(r.service, r.slo): r for r in asyncio.run(fleet_slo())}
            row = rows[("chat", "ttft")]
            if row.remaining is not None:
                break
            time.sleep(0.5)
        assert row.alert == "page" and row.state == "firing"
        assert row.since == pytest.approx(_timestamp(before[0]["activeAt"]))
        # by events: the backfilled hour all late gives 1 - 1.0 / 0.05 = -19 (the rate it is
        # being spent at); the live engine's own requests, nearly all late, keep it near that.
        # The budget says it has watched minutes of its 28 days (partial)
        assert row.remaining is not None and -19.0 - 1e-9 <= row.remaining < -15.0
        assert row.period == "28d"
        assert row.watched_s is not None and 0 < row.watched_s < 3600

        def instant(q: str) -> list[dict]:
            url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode(
                {"query": q}
            )
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]["result"]

        # the bound between edges has its burn and budget series: the backfilled hour half late
        # at the 10 s edge (the live engine adds its own requests for the last minutes)
        hour = instant('inferdeck:slo_errors:ratio_rate1h{service="chat",slo="e2e"}')
        assert hour and 0.3 < float(hour[0]["value"][1]) <= 0.5 + 1e-9, hour
        for _ in range(20):
            left = instant('inferdeck:slo_error_budget:remaining{service="chat",slo="e2e"}')
            if left:
                break
            time.sleep(0.5)
        assert left and -9.0 - 1e-9 <= float(left[0]["value"][1]) < -5.0, left
        exporter.terminate()
        exporter.wait(timeout=20)
        time.sleep(3)
        exporter = export()
        time.sleep(5)
        after = firing()
        assert after and after[0]["activeAt"] == before[0]["activeAt"]
    finally:
        exporter.kill()
        prom.kill()
        am.kill()
        hook.shutdown()
        eng.server.stop()


def test_replicas_and_kubernetes_labels_pick_the_engines_series(tmp_path):
    """Two replicas: a regex over their instances, dots literal; an engine named by its pod's
    labels (a PodMonitor's target) is picked by them instead."""
    settings = Settings.model_validate(
        {
            "engines": [
                {"name": "a", "url": "http://10.0.0.5:8000/metrics", "kind": "vllm"},
                {"name": "b", "url": "http://10.0.0.6:8000/metrics", "kind": "vllm"},
                {
                    "name": "k",
                    "url": "http://chat.ai.svc:8000/metrics",
                    "kind": "vllm",
                    "prometheus_labels": {"namespace": "ai", "pod": "chat-0"},
                },
            ],
            "services": [_service("two", replicas=["a", "b"]), _service("pod", replicas=["k"])],
        }
    )
    doc, _ = rule_groups(settings)
    exprs = {
        (r["labels"]["service"], r["labels"]["slo"]): r["expr"]
        for r in doc["groups"][0]["rules"]
        if r.get("record") == "inferdeck:slo_errors:ratio_rate5m"
    }
    assert (
        'instance=~"10\\\\.0\\\\.0\\\\.5:8000|10\\\\.0\\\\.0\\\\.6:8000"' in exprs[("two", "ttft")]
    )
    assert '{namespace="ai",pod="chat-0",le=~' in exprs[("pod", "ttft")]
    if os.access(PROMTOOL, os.X_OK):
        (tmp_path / "r.yaml").write_text(to_yaml(doc, []))
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(rule_tests(settings, "r.yaml")))
        for args in (("check", "rules", "r.yaml"), ("test", "rules", "t.yaml")):
            ran = _promtool(*args, cwd=tmp_path)
            assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_alertmanager_example_parses_and_one_saturation_sends_one_page(tmp_path):
    """`inferdeck rules --alertmanager` printed YAML that did not parse (`amtool check-config`
    failed), grouped by alertname with no inhibition: one saturation gave 7 firing notifications,
    3 of them pages. Now amtool accepts it, and in a real Alertmanager running it (receivers
    pointed at a webhook here) the alerts one saturation raises on a node — KV critical and
    warning, queue warning, the engine saturated, the node's verdict, an exhaustion forecast —
    send one page and one warning notification (the rest silenced by what says more)."""
    import http.server
    import json
    import threading
    import time

    import httpx

    from tests.test_fleet import wait_ready

    amtool = shutil.which("amtool") or "/usr/bin/amtool"
    for tool in (amtool, ALERTMANAGER):
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is not installed (.ci/run installs prometheus-alertmanager)")
    out = subprocess.run(
        [sys.executable, "-m", "console", "rules", "--alertmanager"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    example = tmp_path / "example.yml"
    example.write_text(out.stdout)
    checked = subprocess.run(
        [amtool, "check-config", str(example)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    got: dict[str, list[dict]] = {}

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.setdefault(self.path.strip("/"), []).append(body)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    doc = yaml.safe_load(out.stdout)
    for r in doc["receivers"]:  # the example's receivers, pointed at the webhook
        r["webhook_configs"] = [{"url": f"http://127.0.0.1:{hook.server_address[1]}/{r['name']}"}]
    for route in doc["route"]["routes"]:
        route["group_wait"] = "2s"  # the example's 30 s, shortened for the test
    (tmp_path / "am.yml").write_text(yaml.safe_dump(doc))
    port = _free_port()
    am = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'am'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url)
        node = {"instance": "10.0.0.5:9464", "job": "inferdeck", "node": "n1"}
        svc = {**node, "service": "chat"}
        fired = [
            {"alertname": "InferdeckKvHeadroomCritical", "severity": "critical", "rule": "kv", **svc},
            {"alertname": "InferdeckKvHeadroomWarning", "severity": "warning", "rule": "kv", **svc},
            {"alertname": "InferdeckQueueHeadroomWarning", "severity": "warning", "rule": "queue",
             **svc},
            {"alertname": "InferdeckEngineSaturated", "severity": "warning", "engine": "chat",
             "slo": "ttft", **node},
            {"alertname": "InferdeckHeadroomExhaustedSoon", "severity": "warning", "rule": "kv",
             **svc},
            {"alertname": "InferdeckNodeCritical", "severity": "critical", **node},
        ]  # fmt: skip
        sent = httpx.post(url + "/api/v2/alerts", json=[{"labels": a} for a in fired], timeout=5)
        assert sent.status_code == 200, sent.text
        deadline = time.time() + 20
        while time.time() < deadline and not (got.get("gpu-oncall-page") and got.get("gpu-oncall")):
            time.sleep(0.5)
        time.sleep(3)  # anything more would follow the first notification within the group_wait
        pages = got.get("gpu-oncall-page", [])
        assert len(pages) == 1, pages
        assert [a["labels"]["alertname"] for a in pages[0]["alerts"]] == [
            "InferdeckKvHeadroomCritical"
        ]  # the node's verdict silenced by the named critical
        warnings = got.get("gpu-oncall", [])
        assert len(warnings) == 1, warnings
        names = sorted(a["labels"]["alertname"] for a in warnings[0]["alerts"])
        # the KV warning and its forecast silenced by the KV critical; the rest in one
        assert names == ["InferdeckEngineSaturated", "InferdeckQueueHeadroomWarning"]
    finally:
        am.terminate()
        am.wait(10)
        hook.shutdown()


def _ttft_day(per_minute: list[tuple[int, int]], reset_at: int | None = None) -> list[dict]:
    """A day of one vLLM's TTFT at 1-minute samples: (requests, of them within 1 s) per minute;
    ``reset_at``: the minute its counters restart from 0 (the engine restarted)."""
    count, good, counts, goods = 0, 0, [0], [0]
    for minute, (n, ok) in enumerate(per_minute, start=1):
        if minute == reset_at:
            count, good = 0, 0
        count, good = count + n, good + ok
        counts.append(count)
        goods.append(good)
    where = 'instance="10.0.0.5:8000",job="engines"'
    return [
        {"series": f"vllm:time_to_first_token_seconds_count{{{where}}}",
         "values": " ".join(map(str, counts))},
        {"series": f'vllm:time_to_first_token_seconds_bucket{{{where},le="1.0"}}',
         "values": " ".join(map(str, goods))},
    ]  # fmt: skip


def test_the_budget_counts_requests_not_minutes(tmp_path):
    """Hand values, in promtool: a day of 23 busy hours (100 requests a minute, all within 1 s)
    and one quiet hour (1 a minute, all late) leaves 1 - (60 / 138,060) / 0.05 = 0.9913 of a p95
    TTFT budget (the old mean of ratios said 0.194); an idle hour in the day leaves it whole, not
    NaN for the period; a counter reset changes nothing; a day with no request has no budget
    figure at all (no data, not a number)."""
    if not os.access(PROMTOOL, os.X_OK):
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    settings = Settings.model_validate(
        {
            "engines": [{"name": "v", "url": "http://10.0.0.5:8000/metrics", "kind": "vllm"}],
            "services": [_service("vchat", engine="v", slo={"ttft_s": 1.0, "completion": 0.995})],
        }
    )
    doc, skipped = rule_groups(settings)
    (tmp_path / "slo.yaml").write_text(to_yaml(doc, skipped))
    busy, quiet, idle = (100, 100), (1, 0), (0, 0)
    day_quiet = [busy] * 720 + [quiet] * 60 + [busy] * 660
    day_idle = [busy] * 720 + [idle] * 60 + [busy] * 660
    labels = '{instance="10.0.0.5:8000", period="28d", service="vchat", slo="ttft"}'
    expr = 'round(inferdeck:slo_error_budget:remaining{service="vchat",slo="ttft"} * 10000)'

    def case(series: list[dict], expected: list[dict]) -> dict:
        return {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [{"expr": expr, "eval_time": "1440m", "exp_samples": expected}],
        }

    tests = {
        "rule_files": ["slo.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            case(_ttft_day(day_quiet), [{"labels": labels, "value": 9913}]),
            case(_ttft_day(day_quiet, reset_at=1000), [{"labels": labels, "value": 9913}]),
            case(_ttft_day(day_idle), [{"labels": labels, "value": 10000}]),
            case(_ttft_day([idle] * 1440), []),
        ],
    }
    (tmp_path / "budget_test.yaml").write_text(yaml.safe_dump(tests, width=10**9))
    ran = _promtool("test", "rules", "budget_test.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def _spelled(edge: float, style: str) -> str:
    """An edge as an engine's client library writes it: Python's 10.0, Go's/Rust's/C++'s 10."""
    text = repr(float(edge))
    return text[:-2] if style == "bare" and text.endswith(".0") else text


def test_a_bound_between_edges_is_read_at_the_edge_below_on_every_profile(tmp_path):
    """Each profile's latency histogram, a bound halfway between two of its edges: promtool fed
    the engine's real edges (every one, spelled as that engine writes them) with a known
    distribution gives the bad share read at the edge below, computed here by hand; a bound
    below the first edge is refused with the edges named, never read as 100 % late."""
    if not os.access(PROMTOOL, os.X_OK):
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    from console.engines import profiles

    bare = {"triton", "tgi", "dynamo"}  # C++ and Rust clients write 100, not 100.0
    keys = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
    tests, cases = [], 0
    for kind, prof in profiles().items():
        for signal, key in keys.items():
            spec = prof.signals.get(signal)
            if spec is None or spec.parts or not spec.le or spec.per_token == spec.series:
                continue
            edges = sorted(spec.le)
            i = len(edges) // 2
            lo, hi = edges[i], edges[i + 1]
            bound_s = (lo + hi) / 2 * spec.scale
            url = f"http://10.0.1.{cases}:8000/metrics"
            settings = Settings.model_validate(
                {
                    "engines": [{"name": "e", "url": url, "kind": kind}],
                    "services": [_service("svc", engine="e", slo={key: bound_s})],
                }
            )
            doc, skipped = rule_groups(settings)
            assert not [x for x in skipped if signal in x], skipped
            rules = f"slo-{kind}-{signal}.yaml"
            (tmp_path / rules).write_text(to_yaml(doc, skipped))
            name = next(n for n in spec.series if n not in spec.per_token).split("{")[0]
            where = f'instance="10.0.1.{cases}:8000",job="engines"'
            # 120 requests a minute: the j-th edge holds (j + 1) x 120 / (n + 1) of them
            n = len(edges)
            per = [(j + 1) * 120 // (n + 1) for j in range(n)]
            style = "bare" if kind in bare else "python"
            series = [
                {"series": f"{name}_bucket{{{where},le=\"{_spelled(e, style)}\"}}",
                 "values": f"0+{c}x10"}
                for e, c in zip(edges, per, strict=True)
            ] + [
                {"series": f"{name}_bucket{{{where},le=\"+Inf\"}}", "values": "0+120x10"},
                {"series": f"{name}_count{{{where}}}", "values": "0+120x10"},
            ]  # fmt: skip
            bad = 1 - per[i] / 120  # read at the edge below the bound
            assert 0 < bad < 1
            tests.append(
                {
                    "interval": "1m",
                    "input_series": series,
                    "promql_expr_test": [
                        {
                            "expr": "round(inferdeck:slo_errors:ratio_rate5m"
                            f'{{slo="{signal}"}} * 1e6)',
                            "eval_time": "10m",
                            "exp_samples": [
                                {
                                    "labels": f'{{instance="10.0.1.{cases}:8000", '
                                    f'service="svc", slo="{signal}"}}',
                                    "value": round(bad * 1e6),
                                }
                            ],
                        }
                    ],
                }
            )
            doc_file = tmp_path / f"test-{kind}-{signal}.yaml"
            doc_file.write_text(
                yaml.safe_dump(
                    {"rule_files": [rules], "evaluation_interval": "1m", "tests": tests[-1:]},
                    width=10**9,
                )
            )
            ran = _promtool("test", "rules", doc_file.name, cwd=tmp_path)
            assert ran.returncode == 0, (kind, signal, ran.stdout + ran.stderr)
            cases += 1
            if edges[0] <= 0:
                continue  # an edge at 0 (Dynamo's): no bound lies below it
            # below the first edge: refused, with the edges named
            low = Settings.model_validate(
                {
                    "engines": [{"name": "e", "url": url, "kind": kind}],
                    "services": [_service("svc", engine="e", slo={key: edges[0] / 2 * spec.scale})],
                }
            )
            _, why = rule_groups(low)
            assert any("below the first bucket edge" in w and signal in w for w in why), why
    assert cases >= 15  # every engine with latency edges: vLLM, SGLang, TGI, Triton, ...
