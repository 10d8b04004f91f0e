"""The plan's arithmetic against DESIGN's seed numbers, its verdicts, and its errors."""

import json
import subprocess
import sys
import textwrap

import pytest

from console.figures.plan import (
    GIB,
    Node,
    Plan,
    Service,
    fit,
    kv_bytes_per_token,
    model_catalog,
    weights_bytes,
)
from console.out.planreport import fits, plan_json
from console.settings import ConfigError, load_settings
from tests.conftest import ROOT


def test_weight_seed_numbers():
    assert round(weights_bytes(70, 4) / GIB, 2) == 32.60
    assert round(weights_bytes(70, 16) / GIB, 2) == 130.39
    assert round(weights_bytes(8, 16) / GIB, 2) == 14.90
    # vendors' decimal GB
    assert (
        weights_bytes(70, 16) / 1e9 == 140
        and weights_bytes(70, 8) / 1e9 == 70
        and weights_bytes(70, 4) / 1e9 == 35
    )
    assert [weights_bytes(32, b) / 1e9 for b in (16, 8, 4)] == [64, 32, 16]
    assert [weights_bytes(8, b) / 1e9 for b in (16, 8, 4)] == [16, 8, 4]


def test_kv_seed_numbers():
    m8, m70 = model_catalog()["llama-3.1-8b"], model_catalog()["llama-3.1-70b"]
    assert kv_bytes_per_token(m8, 16) == 131_072 and kv_bytes_per_token(m70, 16) == 327_680
    assert (
        kv_bytes_per_token(m8, 16) * 8192 == 1 * GIB
        and kv_bytes_per_token(m8, 16) * 32768 == 4 * GIB
    )
    assert (
        kv_bytes_per_token(m70, 16) * 8192 == 2.5 * GIB
        and kv_bytes_per_token(m70, 16) * 32768 == 10 * GIB
    )
    assert kv_bytes_per_token(m70, 8) == 163_840  # KV precision is independent of weight precision


def worked(gpu_model):
    svc = Service(
        name="llama-70b",
        device="0",
        model="llama-3.1-70b",
        weight_bits=4,
        kv_bits=16,
        tokens_per_sequence=8192,
        concurrent_sequences=8,
        runtime_reserve_gib=8,
        margin_gib=3.4,
    )
    return Plan(node=Node(gpus=1, gpu_model=gpu_model), services=[svc])


def test_worked_plan_fits_96gb_not_48gb():
    (rtx,) = fits(worked("rtx-pro-6000-se"))
    (l40s,) = fits(worked("l40s"))
    assert round(rtx.required_bytes / GIB, 2) == 64.00
    assert rtx.fits is True and round(rtx.capacity_bytes / GIB, 2) == 95.59
    assert l40s.fits is False and round(l40s.capacity_bytes / GIB, 2) == 44.99
    doc = json.loads(plan_json(worked("l40s")))
    assert doc["fits"] is False and doc["services"][0]["fits"] is False


def test_weights_only_fit_proves_nothing():
    plan = worked("l40s")
    svc = plan.services[0].model_copy(
        update={
            "concurrent_sequences": 1,
            "tokens_per_sequence": 1024,
            "runtime_reserve_gib": 0,
            "margin_gib": 0,
        }
    )
    assert fit(svc, 44.99 * GIB, "catalog", "").fits is True  # weights alone fit the L40S ...
    assert fits(plan)[0].fits is False  # ... the planned concurrency does not


def test_measured_checkpoint_and_overhead():
    svc = Service(
        name="x",
        device="0",
        model="llama-3.1-8b",
        weights_gib=16.1,
        weight_overhead=0.05,
        tokens_per_sequence=4096,
        concurrent_sequences=4,
    )
    f = fit(svc, None, "unknown", "")
    assert f.weights_bytes == pytest.approx(16.1 * 1.05 * GIB)
    assert f.fits is None


def write(tmp_path, body):
    p = tmp_path / "config.yaml"
    p.write_text(textwrap.dedent(body))
    return p


BASE = """\
node: {gpus: 2, gpu_model: rtx-pro-6000-se}
services:
  - name: a
    device: "0"
    model: llama-3.1-8b
    weight_bits: 16
    tokens_per_sequence: 8192
    concurrent_sequences: 4
"""


@pytest.mark.parametrize(
    "change, expect",
    [
        (
            ("weight_bits: 16", "weight_bitz: 16"),
            r"config.yaml:6: services.0: unknown key 'weight_bitz'",
        ),
        (
            ("concurrent_sequences: 4", "concurrent_sequences: -4"),
            r"config.yaml:8: services.0.concurrent_sequences: must be greater than 0",
        ),
        (
            ("model: llama-3.1-8b", "model: llama-9-1t"),
            r"config.yaml:5: services.0.model: unknown model 'llama-9-1t'; use one of",
        ),
        (
            ('device: "0"', 'device: "5"'),
            r"config.yaml:4: services.0.device: GPU 5 does not exist \(node.gpus is 2",
        ),
        (
            ('device: "0"', 'device: "1:3g.72gb@0"'),
            r"config.yaml:4: services.0.device: .* has no MIG profile '3g.72gb'",
        ),
        (
            ('device: "0"', 'device: "1:2g.48gb@3"'),
            r"config.yaml:4: services.0.device: 2g.48gb cannot start at 3",
        ),
        (
            ('device: "0"', 'device: "gpu zero"'),
            r"config.yaml:4: services.0.device: 'gpu zero' is not a GPU index",
        ),
    ],
)
def test_plan_errors_name_file_line_and_fix(tmp_path, change, expect):
    p = write(tmp_path, BASE.replace(*change))
    with pytest.raises(ConfigError, match=expect) as info:
        load_settings(p)
    assert "\n" not in str(info.value)


def test_plan_cli_errors_exit_2(tmp_path):
    p = write(tmp_path, BASE.replace("concurrent_sequences: 4", "concurrent_sequences: -4"))
    res = subprocess.run(
        [sys.executable, "-m", "console", "plan", "--config", str(p)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        res.returncode == 2
        and res.stdout == ""
        and res.stderr.count("\n") == 1
        and "config.yaml:8" in res.stderr
    )


def test_plan_cli_text_and_json(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "console", "plan", "--demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        res.returncode == 0
        and "64.00" in res.stdout
        and "32.60" in res.stdout
        and "327,680 B/token" in res.stdout
    )
    res = subprocess.run(
        [sys.executable, "-m", "console", "plan", "--demo", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    doc = json.loads(res.stdout)
    assert doc["fits"] is True and [round(s["required_gib"], 2) for s in doc["services"]] == [
        64.0,
        36.9,
        36.9,
    ]


def test_the_kv_condition_names_the_worst_of_four_states():
    """Requests waiting for KV (critical), a full window with preemptions (critical), full
    without them (warning), less capacity than planned (warning), nothing: each its sentence."""
    from console.figures.headroom import _kv_alert
    from console.figures.plan import Service
    from console.frame import Engine

    svc = Service(name="s", device="0", model="llama-3.1-8b", weight_bits=16,
                  tokens_per_sequence=8192, concurrent_sequences=32)  # fmt: skip

    def eng(**kw):
        return Engine(name="e", url="http://127.0.0.1:1/metrics", up=True, kind="vllm", **kw)

    waiting = _kv_alert(svc, eng(kv_cache_usage=0.97, requests_waiting_kv=3, preemptions=5),
                        40.0, 1.2, True, 0.99)  # fmt: skip
    assert waiting is not None and waiting[0] == "critical"
    assert waiting[1].startswith("3 requests waiting for the KV cache (use 97% now, peak 99%")
    assert "5 preemptions" in waiting[1]
    preempting = _kv_alert(svc, eng(kv_cache_usage=0.9, preemptions=2), 40.0, 4.0, True, 0.98)
    assert preempting == ("critical", "KV cache 98% full in the window with 2 preemptions: shed "
                          "load, add a replica, or lower --max-num-seqs")  # fmt: skip
    full = _kv_alert(svc, eng(kv_cache_usage=0.9, preemptions=0), 40.0, 4.0, True, 0.96)
    assert full is not None and full[0] == "warning" and "the next burst will queue" in full[1]
    short = _kv_alert(svc, eng(kv_cache_usage=0.2), 19.5, -12.5, False, 0.2)
    assert short is not None and short[0] == "warning"
    assert short[1].startswith("KV capacity 19.5 seqs at 8,192 tokens < plan 32: lower")
    assert _kv_alert(svc, eng(kv_cache_usage=0.2), 40.0, 8.0, False, 0.2) is None
