"""Parser throughput: inferdeck's exposition parser vs prometheus_client's, in one run.

    python bench/parser_speed.py

Prints ms per page and the ratio on the real vLLM capture and on a ~1 MB multi-model page.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from console.engines import profiles  # noqa: E402
from console.promtext import parse  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "metrics" / "vllm-live.prom"


def needed_families() -> set[str]:
    names: set[str] = set()
    for prof in profiles().values():
        for spec in prof.signals.values():
            for s in spec.series:
                base = s.split("{", 1)[0]
                names.update({base, base + "_bucket", base + "_count", base + "_sum"})
    return names


def multi_model_page(base: str, size: int = 1_000_000) -> str:
    parts, i = [], 0
    while sum(map(len, parts)) < size:
        parts.append(re.sub(r'model_name="[^"]*"', f'model_name="model-{i}"', base))
        i += 1
    return "\n".join(parts)


def timeit(fn, text: str, min_s: float = 1.0) -> float:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_s:
        fn(text)
        n += 1
    return (time.perf_counter() - start) / n


def peer(text: str) -> None:
    for _ in text_string_to_metric_families(text):
        pass


def main() -> None:
    live = FIXTURE.read_text(encoding="utf-8")
    big = multi_model_page(live)
    wanted = needed_families()
    print(
        f"{'page':<24}{'bytes':>10}{'prometheus_client':>20}{'inferdeck':>12}{'ratio':>8}{'inferdeck+skip':>16}{'ratio':>8}"
    )
    for label, text in (("vllm-live.prom", live), ("1 MB multi-model", big)):
        t_peer = timeit(peer, text)
        t_ours = timeit(parse, text)
        t_skip = timeit(lambda s: parse(s, keep=wanted.__contains__), text)
        print(
            f"{label:<24}{len(text):>10,}{t_peer * 1e3:>17.2f} ms{t_ours * 1e3:>9.2f} ms"
            f"{t_peer / t_ours:>7.1f}x{t_skip * 1e3:>13.2f} ms{t_peer / t_skip:>7.1f}x"
        )


if __name__ == "__main__":
    main()
