"""Random YAML gives either a valid config or one clear sentence naming the file: never a
traceback."""

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from console.settings import ConfigError, Settings, load_settings

KEYS = [
    "window",
    "interval_s",
    "discover",
    "engines",
    "services",
    "node",
    "alerts",
    "cost",
    "bell",
    "url",
    "kind",
    "name",
    "device",
    "model",
    "weight_bits",
    "tokens_per_sequence",
    "concurrent_sequences",
    "typo",
    "prometheus",
    "snapshot_dir",
    "token_env",
    "gpus",
    "gpu_model",
]
leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "1m",
            "5m",
            "vllm",
            "http://127.0.0.1:8000/metrics",
            "0",
            "1:2g.48gb@0",
            "llama-3.1-8b",
            "rtx-pro-6000-se",
        ]
    ),
)
tree = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(tree, st.text(max_size=80)))
def test_random_yaml_is_a_config_or_one_sentence(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    try:
        result = load_settings(path)
    except ConfigError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg and msg.endswith("."), msg
    else:
        assert isinstance(result, Settings)
