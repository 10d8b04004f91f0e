"""Every simulator speaks its engine's format: detected as that kind, signals present, and the
restart profile never yields a negative rate."""

import pytest

from console.engines import detect_kind, extract, needed_families, profiles
from console.figures.enginestats import derive
from console.figures.windowed import EngineHistory
from console.promtext import parse
from console.sim.engine import TrafficModel, TrafficSpec, page_for
from console.sim.formats import FORMATS


class Clock:
    def __init__(self):
        self.t = 5000.0

    def __call__(self):
        return self.t


def run(kind, spec, seconds, step=1.0):
    clock = Clock()
    model = TrafficModel(spec, clock=clock, buckets=FORMATS[kind][1])
    prof, hist = profiles()[kind], EngineHistory()
    frames = []
    for _ in range(int(seconds / step)):
        clock.t += step
        page = parse(page_for(kind, model), keep=needed_families().__contains__)
        assert page.bad_lines == 0
        assert detect_kind(page) == kind
        hist.add(extract(page, prof, clock.t))
        frames.append(derive(hist.points, prof, 60))
    return model, frames


EXPECTED = {
    "vllm": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "ttft_s",
        "tpot_s",
        "itl_s",
        "e2e_s",
        "queue_time_s",
        "success_rate",
        "prefix_cache_hit_rate",
        "preemptions",
    },
    "sglang": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "ttft_s",
        "tpot_s",
        "itl_s",
        "e2e_s",
        "queue_time_s",
        "success_rate",
        "prefix_cache_hit_rate",
        "preemptions",
    },
    "tgi": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "queue_time_s",
        "success_rate",
    },
    "triton": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "ttft_s",
        "success_rate",
        "e2e_mean_s",
        "queue_mean_s",
    },
    "llamacpp": {
        "requests_running",
        "requests_waiting",
        "generation_tokens_per_s",
        "prompt_tokens_per_s",
    },
    "trtllm": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "prompt_tokens_per_s",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "queue_time_s",
        "success_rate",
        "prefix_cache_hit_rate",
    },
    "dynamo": {
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "kv_capacity_tokens",
        "generation_tokens_per_s",
        "prompt_tokens_per_s",
        "ttft_s",
        "itl_s",
        "e2e_s",
        "success_rate",
        "ranks",
    },
}


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_simulator_yields_the_engines_signals(kind):
    model, frames = run(kind, TrafficSpec(rate_rps=5, seed=11, warmup_s=30), 30)
    d = frames[-1]
    present = {k for k, v in d.fields.items() if v is not None}
    assert EXPECTED[kind] <= present, EXPECTED[kind] - present
    assert 0 <= d.fields["generation_tokens_per_s"] < 10_000
    if "success_rate" in d.fields:
        assert 0.9 <= d.fields["success_rate"] <= 1.0
    if kind == "tgi":
        assert d.fields["ttft_s"].approx and "tgi_request_queue_duration" in d.fields["ttft_s"].note
    if kind == "llamacpp":
        assert d.unavailable["ttft_s"] == "llama.cpp does not export this"


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_restart_profile_never_negative(kind):
    model, frames = run(
        kind, TrafficSpec(rate_rps=5, seed=3, profile="restart", restart_every_s=20), 70
    )
    assert model.restarts >= 3
    for d in frames:
        for fld in (
            "generation_tokens_per_s",
            "prompt_tokens_per_s",
            "preemptions",
            "requests_finished",
        ):
            v = d.fields.get(fld)
            assert v is None or v >= 0, (fld, v)
    assert any(d.reset_at is not None for d in frames)


def test_overload_queue_grows_and_kv_fills():
    model, frames = run(
        "vllm",
        TrafficSpec(
            rate_rps=6, profile="overload", max_num_seqs=24, kv_capacity_tokens=30_000, seed=4
        ),
        90,
    )
    waits = [d.fields["requests_waiting"] for d in frames]
    assert waits[-1] > 20 and waits[-1] > waits[10]
    assert frames[-1].fields["kv_cache_usage"] > 0.7


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_every_latency_histogram_writes_edges_its_profile_lists(kind):
    """The SLO rules read a bound at the profile's edges, spelled as engines write them: each
    latency histogram the simulator writes has its edges among the profile's (``le`` and
    ``le_older``), text for text, so the rules find their bucket on the simulated engines."""
    from console.promtext import label

    model = TrafficModel(TrafficSpec(rate_rps=5, seed=3), clock=Clock(), buckets=FORMATS[kind][1])
    page = parse(page_for(kind, model))
    prof = profiles()[kind]
    checked = 0
    for signal in ("ttft", "tpot", "itl", "e2e", "queue_time"):
        spec = prof.signals.get(signal)
        if spec is None or spec.type != "histogram" or spec.parts or not spec.le:
            continue
        listed = {repr(float(e)) for e in spec.le + spec.le_older}
        listed |= {t[:-2] for t in listed if t.endswith(".0")}  # Go's and Rust's 10 for 10.0
        for name in spec.series:
            rows = page.get(name.split("{")[0] + "_bucket")
            if not rows:
                continue
            written = {label(labels, "le") for labels, _ in rows} - {"+Inf", None}
            assert written and written <= listed, (signal, sorted(written - listed)[:5])
            checked += 1
    assert checked or kind == "llamacpp", kind
