"""`inferdeck export` and `inferdeck rules` against a real Prometheus: it scrapes the exporter of an
overloaded simulated node, evaluates the generated rules, and the headroom and burn alerts fire,
then resolve when the load drops."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from console.out.exporter import alert_rules, frame_metrics
from console.promtext import parse
from console.settings import Settings
from console.sim.engine import TrafficSpec, start_engine
from tests.frames import node_frame

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_frame_metrics_names_units_and_absent_unknowns():
    frame = node_frame()
    text = frame_metrics(frame, Settings(), "9.9")
    page = parse(text)
    rows = dict(page.get("inferdeck_headroom_bytes"))
    key = (("service", "llama-70b"), ("rule", "memory"))
    assert rows[key] == pytest.approx(5.8 * 2**30)  # GiB on screen, bytes for Prometheus
    sev = dict(page.get("inferdeck_headroom_severity"))
    assert sev[(("service", "llama-8b-a"), ("rule", "kv"))] == 2  # critical
    assert sev[(("service", "llama-70b"), ("rule", "queue"))] == 1  # warning
    up = dict(page.get("inferdeck_engine_up"))
    assert up[(("engine", "llama-8b-b"), ("kind", "vllm"))] == 0
    # MIG activity per GPU instance, from GPM
    acts = dict(page.get("inferdeck_gpu_activity_ratio"))
    assert acts[(("gpu", "1"), ("gpu_instance", "1"))] == pytest.approx(0.71)
    assert "nan" not in text.lower()
    for line in text.splitlines():  # every family typed, documented, in the inferdeck_ namespace
        assert line.startswith(("# HELP inferdeck_", "# TYPE inferdeck_", "inferdeck_"))


def test_rules_pass_promtool(tmp_path):
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    rules = tmp_path / "rules.yml"
    rules.write_text(alert_rules(Settings()))
    out = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # 5 headroom rules x 2 severities, 2 burn, saturation, exhaustion, engine down, verdict, exporter
    assert "SUCCESS: 17 rules found" in out.stdout


def _alerts(url: str) -> set[str]:
    """Firing alerts (empty while Prometheus is still starting)."""
    try:
        r = httpx.get(
            url + "/api/v1/query", params={"query": 'ALERTS{alertstate="firing"}'}, timeout=5
        )
        return {x["metric"]["alertname"] for x in r.json()["data"]["result"]}
    except (httpx.HTTPError, ValueError, KeyError):
        return set()


def _wait(what, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if what():
            return True
        time.sleep(1.0)
    return False


@contextlib.contextmanager
def _stopping(engine):
    try:
        yield engine
    finally:
        engine.stop()


@contextlib.contextmanager
def _exported_into_prometheus(tmp_path, cfg, env):
    """``inferdeck export`` of ``cfg`` scraped at 1 s by a real Prometheus loaded with the rules
    ``inferdeck rules`` writes for it; yields (Prometheus URL, exporter port, exporter)."""
    rules = tmp_path / "rules.yml"
    out = _cli("rules", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    rules.write_text(out.stdout)
    port, prom_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "console", "export", "--config", str(cfg), "--no-gpu",
         "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(
        textwrap.dedent(f"""\
        global:
          scrape_interval: 1s
          evaluation_interval: 1s
        rule_files: ["{rules}"]
        scrape_configs:
          - job_name: inferdeck
            static_configs:
              - targets: ['127.0.0.1:{port}']
        """)
    )
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{prom_port}", port, exporter
    finally:
        prom.kill()
        exporter.terminate()
        try:
            exporter.wait(10)
        except subprocess.TimeoutExpired:
            exporter.kill()


@pytest.mark.slow
def test_prometheus_fires_and_resolves_inferdecks_alerts(tmp_path):
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    # overloaded: four slots for twelve requests a second, four in ten failing
    spec = TrafficSpec(
        rate_rps=12.0,
        max_num_seqs=4,
        output_tokens=60,
        prompt_tokens=200,
        client_timeout_s=4.0,
        error_share=0.4,
        abort_share=0.0,
        seed=5,
    )
    eng = start_engine("vllm", spec)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        interval_s: 1
        discover: false
        engines:
          - {{name: v, url: "{eng.url}"}}
        services:
          - name: chat
            engine: v
            device: "0"
            model: llama-3.1-8b
            weight_bits: 16
            tokens_per_sequence: 1024
            concurrent_sequences: 4
            slo: {{ttft_s: 2.0}}
        alerts:
          queue: {{for_s: 0, clear_s: 0}}
          burn: {{for_s: 0, clear_s: 0}}
        cost: {{system_cost_usd: 48000}}
        """)
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    with _exported_into_prometheus(tmp_path, cfg, env) as (url, port, exporter), _stopping(eng):
        firing = {"InferdeckQueueHeadroomWarning"}
        assert _wait(lambda: firing <= _alerts(url), 120), _alerts(url)
        # four in ten requests fail, but the burn windows hold under 5 minutes: the exporter
        # serves their coverage and no burn rate, so the burn rules cannot page on it
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'inferdeck_slo_burn_window_covered_seconds{service="chat",window="5m"}' in page
        assert "inferdeck_slo_burn_rate{" not in page
        assert not {"InferdeckErrorBudgetFastBurn", "InferdeckErrorBudgetSlowBurn"} & _alerts(url)
        # the fleet, headless, reads the node's own verdicts from its export
        check = _cli("check", "--prometheus", url, env=env)
        assert check.returncode == 1, check.stdout + check.stderr  # the queue is a warning
        first = check.stdout.splitlines()[0]
        # the rule's own sentence with its figure, and one time: the alert's
        assert first.startswith("INFERDECK WARNING - 127.0.0.1 chat: "), first
        assert (
            " requests waiting where the plan allows none, by the node's inferdeck export, since "
            in first
            and " ago)" in first
        ), first
        snap = _cli("snapshot", "--prometheus", url, env=env)
        (node,) = json.loads(snap.stdout)["nodes"]
        assert node["worst"] == "warning" and node["cost_basis"] == "node's inferdeck export"
        assert node["usd_per_m_compliant_tokens_at_least"] is not None
        # the load drops: arrivals within capacity, no failures; the queue drains and good
        # requests outweigh the failures in the burn windows
        eng.model.spec.rate_rps = 6.0
        eng.model.spec.max_num_seqs = 64
        eng.model.spec.error_share = 0.0
        assert _wait(lambda: not (firing & _alerts(url)), 180), _alerts(url)
    assert exporter.returncode == 0, exporter.stderr.read() if exporter.stderr else ""


@pytest.mark.slow
def test_export_refuses_a_bad_listen_address_and_needs_the_token(tmp_path):
    out = _cli("export", "--no-gpu", "--no-discover", "--listen", "nowhere")
    assert out.returncode == 2 and "give HOST:PORT" in out.stderr
    assert "Traceback" not in out.stderr
    token = tmp_path / "t"
    token.write_text("s3cret\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "console",
            "export",
            "--no-gpu",
            "--no-discover",
            "--listen",
            f"127.0.0.1:{port}",
            "--token-file",
            str(token),
            "--duration",
            "20",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    try:
        base = f"http://127.0.0.1:{port}/metrics"
        assert _wait(lambda: _get(base) is not None, 30)
        assert _get(base).status_code == 401
        ok = httpx.get(base, headers={"Authorization": "Bearer s3cret"}, timeout=5)
        assert ok.status_code == 200 and "inferdeck_build_info" in ok.text
        assert "s3cret" not in ok.text
        # the health check answers a probe without the token and tells no figure; the verdict
        # (every figure) keeps the token
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status_code == 200 and health.text.startswith("ok: last poll ")
        assert "inferdeck_" not in health.text and "s3cret" not in health.text
        verdict = httpx.get(f"http://127.0.0.1:{port}/verdict.json", timeout=5)
        assert verdict.status_code == 401
    finally:
        proc.terminate()
        proc.wait(10)


def _get(url: str):
    try:
        return httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return None


def test_the_burn_rules_fire_on_served_burn_and_never_on_absent_burn(tmp_path):
    """promtool's rule unit tests on the generated rules: 20x burn over 5m and 1h pages within a
    minute; 8x over 1h and 6h warns; a window the exporter does not serve yet (not enough
    coverage) pages nothing, whatever the other window reads."""
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    out = _cli("rules", "--demo")
    assert out.returncode == 0, out.stderr
    (tmp_path / "rules.yml").write_text(out.stdout)

    def burn(service: str, window: str, values: str) -> str:
        return (
            f'      - series: \'inferdeck_slo_burn_rate{{instance="n:9464",service="{service}",'
            f"window=\"{window}\"}}'\n        values: '{values}'\n"
        )

    def fired(name: str, service: str, window: str, severity: str, summary: str) -> str:
        return (
            f"          - exp_labels: {{alertname: {name}, severity: {severity}, "
            "source: inferdeck-export, "
            f"instance: 'n:9464', service: {service}, window: {window}}}\n"
            f"            exp_annotations: {{summary: '{service}: {summary}'}}\n"
        )

    (tmp_path / "test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        "    input_series:\n"
        + burn("fast", "5m", "20x30")
        + burn("fast", "1h", "20x30")
        + burn("slow", "1h", "8x30")
        + burn("slow", "6h", "8x30")
        + burn("young", "1h", "30x30")  # its 5m window is not served: not enough coverage
        + "    alert_rule_test:\n"
        "      - eval_time: 10m\n        alertname: InferdeckErrorBudgetFastBurn\n"
        "        exp_alerts:\n"
        + fired(
            "InferdeckErrorBudgetFastBurn",
            "fast",
            "5m",
            "critical",
            "error budget burning at 14.4x or more (5m and 1h)",
        )
        + "      - eval_time: 10m\n        alertname: InferdeckErrorBudgetSlowBurn\n"
        "        exp_alerts:\n"
        + fired(
            "InferdeckErrorBudgetSlowBurn",
            "slow",
            "1h",
            "warning",
            "error budget burning at 6x or more (1h and 6h)",
        )
    )
    res = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp_path / "test.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_headroom_rules_nest_so_a_rising_severity_never_resets_the_warning(tmp_path):
    """The warning (== 1) and critical (== 2) rules reset each other: in a real Prometheus the KV
    critical went pending 3-4 times per overload and never fired. Now >= 1 and >= 2: severity 1
    for 5 minutes, then 2 for 20: the warning fires throughout, the critical after its `for`."""
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    out = _cli("rules", "--demo")
    (tmp_path / "rules.yml").write_text(out.stdout)
    labels = (
        "{alertname: %s, severity: %s, source: inferdeck-export, instance: 'n:9464', service: s, "
        "rule: kv}"
    )
    summary = {
        "warning": "s: kv headroom at or past its budget (severity %s); the console and "
        "inferdeck check say why",
        "critical": "s: kv headroom critical (severity %s); the console and inferdeck check say why",
    }

    test = (
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        "    input_series:\n"
        '      - series: \'inferdeck_headroom_severity{instance="n:9464",service="s",rule="kv"}\'\n'
        "        values: '1x5 2x20'\n"
        "    alert_rule_test:\n"
    )
    test += (
        "      - eval_time: 3m\n        alertname: InferdeckKvHeadroomWarning\n        exp_alerts:\n"
        f"          - exp_labels: {labels % ('InferdeckKvHeadroomWarning', 'warning')}\n"
        f"            exp_annotations: {{summary: '{summary['warning'] % 1}'}}\n"
        "      - eval_time: 3m\n        alertname: InferdeckKvHeadroomCritical\n"
        "      - eval_time: 15m\n        alertname: InferdeckKvHeadroomWarning\n        exp_alerts:\n"
        f"          - exp_labels: {labels % ('InferdeckKvHeadroomWarning', 'warning')}\n"
        f"            exp_annotations: {{summary: '{summary['warning'] % 2}'}}\n"
        "      - eval_time: 15m\n        alertname: InferdeckKvHeadroomCritical\n        exp_alerts:\n"
        f"          - exp_labels: {labels % ('InferdeckKvHeadroomCritical', 'critical')}\n"
        f"            exp_annotations: {{summary: '{summary['critical'] % 2}'}}\n"
    )
    (tmp_path / "test.yml").write_text(test)
    res = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp_path / "test.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_an_overloaded_engine_is_critical_in_check_and_fires_in_a_real_prometheus(tmp_path):
    """Overloaded past its SLOs (KV full, preemptions, the queue growing): `check` exits 2 with
    INFERDECK CRITICAL first, on 20 consecutive runs; the exporter serves inferdeck_status 2 and
    the generated KV critical rule fires in a real Prometheus."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    spec = TrafficSpec(
        rate_rps=6.0,
        kv_capacity_tokens=20_000,
        prompt_tokens=900,
        output_tokens=400,
        warmup_s=60.0,
        seed=9,
    )
    eng = start_engine("vllm", spec)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        interval_s: 1
        discover: false
        engines:
          - {{name: v, url: "{eng.url}"}}
        services:
          - name: chat
            engine: v
            device: "0"
            model: llama-3.1-8b
            weight_bits: 16
            tokens_per_sequence: 1024
            concurrent_sequences: 4
        alerts:
          kv: {{for_s: 0, clear_s: 0}}
        """)
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    with _exported_into_prometheus(tmp_path, cfg, env) as (url, port, _), _stopping(eng):
        codes = []
        for _ in range(20):
            res = _cli("check", "--config", str(cfg), "--no-gpu", env=env)
            codes.append(res.returncode)
            assert res.stdout.startswith("INFERDECK CRITICAL - "), res.stdout
        assert set(codes) == {2}
        assert _wait(lambda: "InferdeckKvHeadroomCritical" in _alerts(url), 120), _alerts(url)
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "\ninferdeck_status 2.0\n" in page


def _engine_alerts(url: str) -> dict[str, str]:
    """KV and queue alerts in Prometheus, pending or firing: name -> state."""
    try:
        r = httpx.get(
            url + "/api/v1/query",
            params={"query": 'ALERTS{alertname=~"InferdeckKv.*|InferdeckQueue.*"}'},
            timeout=5,
        )
        return {
            x["metric"]["alertname"]: x["metric"]["alertstate"] for x in r.json()["data"]["result"]
        }
    except (httpx.HTTPError, ValueError, KeyError):
        return {}


def test_an_engine_killed_under_overload_stops_its_kv_alerts_in_prometheus_until_judged_again(
    tmp_path,
):
    """A real Prometheus with `inferdeck rules`, the exporter polling an overloaded engine with its
    KV alert firing. Killed: the KV and queue alerts leave within a few rule evaluations of the
    exporter's next poll and none is pending or firing while it is down (only InferdeckEngineDown
    speaks). Back (still overloaded, on the same port): none in its first 10 s either; then the
    overload is judged again on fresh data and the KV alert returns."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    spec = TrafficSpec(rate_rps=6.0, kv_capacity_tokens=20_000, prompt_tokens=900,
                       output_tokens=400, warmup_s=60.0, seed=9)  # fmt: skip
    eng = start_engine("vllm", spec)
    port = eng.server.port
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        interval_s: 1
        discover: false
        engines:
          - {{name: v, url: "{eng.url}"}}
        services:
          - name: chat
            engine: v
            device: "0"
            model: llama-3.1-8b
            weight_bits: 16
            tokens_per_sequence: 1024
            concurrent_sequences: 4
        alerts:
          kv: {{for_s: 0, clear_s: 0}}
          queue: {{for_s: 0, clear_s: 0}}
          engine_down: {{for_s: 0}}
        """)
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    back = None
    try:
        with _exported_into_prometheus(tmp_path, cfg, env) as (url, _, _):
            assert _wait(
                lambda: _engine_alerts(url).get("InferdeckKvHeadroomCritical") == "firing", 120
            )
            eng.stop()
            killed = time.monotonic()
            assert _wait(lambda: not _engine_alerts(url), 10), _engine_alerts(url)
            gone_s = time.monotonic() - killed
            assert _wait(lambda: "InferdeckEngineDown" in _alerts(url), 10)
            while time.monotonic() - killed < 20:  # down: nothing from its last figures
                assert not _engine_alerts(url), _engine_alerts(url)
                time.sleep(0.5)
            back = start_engine("vllm", spec, port=port)
            returned = time.monotonic()
            while time.monotonic() - returned < 10:  # back: judged again only after 10 s
                assert not _engine_alerts(url), (time.monotonic() - returned, _engine_alerts(url))
                time.sleep(0.5)
            assert _wait(
                lambda: _engine_alerts(url).get("InferdeckKvHeadroomCritical") == "firing", 30
            )
    finally:
        eng.stop()
        if back is not None:
            back.stop()
    assert gone_s < 6, gone_s  # the exporter's next poll (1 s), a scrape (1 s), an evaluation (1 s)


def test_check_reads_the_running_exports_verdict_over_its_full_window(tmp_path):
    """`check` beside a running `inferdeck export` of the same engines and plan reads the
    export's newest frame (its whole window: the 2 s sample read 16.6-56.5 tok/s on a load whose
    truth was 30-36), says so on its first line, and exits by that verdict, which is the one the
    exporter serves to Prometheus. Another plan, or a token it lacks: it samples on its own and
    says why. The token is never printed."""
    engine = start_engine("vllm", TrafficSpec(rate_rps=3.0, output_tokens=200, seed=5))
    port = free_port()
    token = tmp_path / "t"
    token.write_text("s3cret-verdict\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    common = ["--no-gpu", "--no-discover", "--engine", engine.url]
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "export", *common, "--interval", "1",
         "--listen", f"127.0.0.1:{port}", "--token-file", str(token), "--duration", "60"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer s3cret-verdict"}
    try:

        def covered() -> float:
            try:
                doc = httpx.get(base + "/verdict.json", headers=auth, timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return 0.0
            return float((doc.get("frame") or {}).get("window_covered_s") or 0.0)

        assert _wait(lambda: covered() >= 8, 40)
        got = _cli("check", *common, "--interval", "1", "--export", base,
                   "--export-token-file", str(token), env=env)  # fmt: skip
        first = got.stdout.splitlines()[0]
        assert f"[inferdeck export at 127.0.0.1:{port}, its frame " in first, got.stdout
        assert " s of its 1m window watched]" in first
        page = parse(httpx.get(base + "/metrics", headers=auth, timeout=2).text)
        assert got.returncode == int(dict(page.get("inferdeck_status"))[()])
        assert "s3cret" not in got.stdout + got.stderr
        # no token: the export refuses, and the check samples on its own
        alone = _cli("check", *common, "--interval", "1", "--export", base, env=env)
        assert "[over 2 s sampled of a 1m window]" in alone.stdout.splitlines()[0], alone.stdout
        # another plan (a window of 5m): the export's verdict is not this check's
        other = _cli("check", *common, "--interval", "1", "--window", "5m", "--export", base,
                     "--export-token-file", str(token), env=env)  # fmt: skip
        assert "inferdeck export at" not in other.stdout.splitlines()[0]
        assert other.stdout.splitlines()[-1] == (
            f"an inferdeck export at {base} polls with another plan: this check sampled on its own"
        )
    finally:
        proc.terminate()
        proc.wait(10)
        engine.server.stop()
