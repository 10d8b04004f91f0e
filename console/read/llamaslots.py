"""KV use of a llama.cpp server from its ``GET /slots`` answer (its /metrics has no KV gauge)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

from console.frame import LlamaSlot


def slots_url(metrics_url: str) -> str:
    parts = urlsplit(metrics_url)
    path = parts.path.rsplit("/", 1)[0] + "/slots"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def slots_kv(text: str) -> tuple[float, float, list[LlamaSlot]]:
    """(usage 0..1, capacity tokens, one row per slot) from the per-slot context sizes and the tokens
    held by slots that are processing (prompt + decoded). Raises ValueError on an unexpected shape."""
    data = json.loads(text)
    if not isinstance(data, list) or not data:
        raise ValueError("expected a non-empty list of slots")
    capacity = used = 0.0
    rows: list[LlamaSlot] = []
    for i, slot in enumerate(data):
        if not isinstance(slot, dict) or "n_ctx" not in slot:
            raise ValueError("slot without n_ctx")
        capacity += float(slot["n_ctx"])
        busy = bool(slot.get("is_processing"))
        decoded = prompt = 0.0
        if busy:
            nxt = slot.get("next_token")
            if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict):
                decoded = float(nxt[0].get("n_decoded", 0))
            elif isinstance(nxt, dict):
                decoded = float(nxt.get("n_decoded", 0))
            prompt = float(slot.get("n_prompt_tokens", 0))
            used += prompt + decoded
        rows.append(
            LlamaSlot(
                id=int(slot.get("id", i)),
                n_ctx=int(slot["n_ctx"]),
                processing=busy,
                prompt_tokens=int(prompt),
                decoded_tokens=int(decoded),
            )
        )
    if capacity <= 0:
        raise ValueError("slots report no context")
    return min(1.0, used / capacity), capacity, rows
