import pytest

from console.engines import ProfileError, _load, detect_kind, extract, profiles
from console.figures.enginestats import derive
from console.figures.windowed import EngineHistory
from console.promtext import parse
from tests.conftest import fixture_text


def test_vllm_live_extracts_signals_with_series_names():
    page = parse(fixture_text("vllm-live.prom"))
    assert detect_kind(page) == "vllm"
    ex = extract(page, profiles()["vllm"], t=0.0)
    assert ex.model == "smollm2"
    assert ex.series["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert ex.series["tpot"] == "vllm:request_time_per_output_token_seconds"
    assert ex.series["itl"] == "vllm:inter_token_latency_seconds"
    d = derive([ex], profiles()["vllm"], 60)
    assert d.fields["requests_running"] == 0.0 and d.fields["kv_cache_usage"] == 0.0
    ttft = d.fields["ttft_s"]
    assert ttft.window == "since_start" and ttft.observations == 6
    assert ttft.p95 == pytest.approx(0.098, abs=1e-12)
    assert "generation_tokens_per_s" in d.unavailable  # a rate needs two scrapes


def test_early_v1_uses_renamed_series():
    page = parse(fixture_text("vllm-3.prom"))
    ex = extract(page, profiles()["vllm"], t=0.0)
    assert ex.series["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert ex.series.get("itl") in (None, "vllm:time_per_output_token_seconds")


def test_dp_ranks_are_summed_by_le_before_the_quantile():
    page = parse(fixture_text("vllm-4.prom"))
    ex = extract(page, profiles()["vllm"], t=0.0)
    for signal, groups in ex.histograms.items():
        if len(groups) > 1:
            d = derive([ex], profiles()["vllm"], 60)
            field = {"ttft": "ttft_s", "itl": "itl_s", "tpot": "tpot_s", "e2e": "e2e_s"}.get(signal)
            if field:
                total = sum(v[-1] for v in groups.values())
                assert d.fields[field].observations == total


def test_windowed_rates_and_percentiles_from_two_scrapes():
    prof = profiles()["vllm"]

    def page(gen, b1, b2, inf):
        return parse(
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="m"}} {b1}\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.5",model_name="m"}} {b2}\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {inf}\n'
            f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {inf}\n'
        )

    h = EngineHistory()
    h.add(extract(page(1000, 10, 10, 10), prof, 0.0))
    h.add(extract(page(1600, 12, 20, 20), prof, 30.0))
    d = derive(h.points, prof, 60)
    assert d.fields["generation_tokens_per_s"] == 20.0
    ttft = d.fields["ttft_s"]
    # deltas: le=0.1 -> 2, le=0.5 -> 10, +Inf -> 10. p50: rank 5 -> 0.1 + 0.4 * 3/8
    assert ttft.window == "1m" and ttft.observations == 10
    assert ttft.p50 == pytest.approx(0.1 + 0.4 * 3 / 8, abs=1e-12)


def test_bad_profile_file_gives_one_sentence():
    with pytest.raises(
        ProfileError, match=r"engines.yaml:5: x.signals.a.type: must be one of .gauge."
    ):
        _load(
            "x:\n  title: X\n  detect: [a]\n  signals:\n    a: {type: wrong, series: [a]}\n",
            "engines.yaml",
        )
    with pytest.raises(ProfileError, match=r"engines.yaml:\d+: not valid YAML"):
        _load("x:\n  - [unclosed\n", "engines.yaml")


def test_repeated_scrapes_share_label_sets_and_bounds():
    # the 15-minute history holds ~900 scrapes of the same series: their keys and bounds are one copy
    prof = profiles()["vllm"]
    a = extract(parse(fixture_text("vllm-live.prom")), prof, t=0.0)
    b = extract(parse(fixture_text("vllm-live.prom")), prof, t=1.0)
    ((ka, va),) = a.histograms["ttft"].items()
    ((kb, vb),) = b.histograms["ttft"].items()
    assert ka is kb and a.bounds["ttft"][ka] is b.bounds["ttft"][kb]
    assert va is not vb and list(va) == list(vb) and va.itemsize == 8
    assert len(va) == len(a.bounds["ttft"][ka]) + 1  # buckets, then the count


def test_the_history_keeps_one_copy_of_what_stood_still():
    # a second scrape of the same page: every part is the first one's objects once kept
    prof = profiles()["vllm"]
    a = extract(parse(fixture_text("vllm-live.prom")), prof, t=0.0)
    b = extract(parse(fixture_text("vllm-live.prom")), prof, t=1.0)
    c = extract(
        parse(fixture_text("vllm-live.prom").replace("vllm:num_requests_running{", "x{")),
        prof,
        t=2.0,
    )
    h = EngineHistory()
    for ex in (a, b, c):
        h.add(ex)
    for kind in (
        "series",
        "info",
        "hints",
        "problems",
        "gauges",
        "counters",
        "histograms",
        "bounds",
    ):
        assert getattr(b, kind) is getattr(a, kind), kind
    assert b.grew is not a.grew and b.grew  # the first scrape grew nothing; the second, everything
    assert c.grew == b.grew and c.grew is b.grew
    assert c.series is not b.series and "running" not in c.gauges  # what changed is its own
    assert c.counters is b.counters and c.gauges is not b.gauges
