"""KV use of a llama.cpp server from its ``GET /slots`` answer (its /metrics has no KV gauge)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit


def slots_url(metrics_url: str) -> str:
    parts = urlsplit(metrics_url)
    path = parts.path.rsplit("/", 1)[0] + "/slots"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def slots_kv(text: str) -> tuple[float, float]:
    """(usage 0..1, capacity tokens) from the per-slot context sizes and the tokens held by
    slots that are processing (prompt + decoded). Raises ValueError on an unexpected shape."""
    data = json.loads(text)
    if not isinstance(data, list) or not data:
        raise ValueError("expected a non-empty list of slots")
    capacity = used = 0.0
    for slot in data:
        if not isinstance(slot, dict) or "n_ctx" not in slot:
            raise ValueError("slot without n_ctx")
        capacity += float(slot["n_ctx"])
        if slot.get("is_processing"):
            decoded = 0.0
            nxt = slot.get("next_token")
            if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict):
                decoded = float(nxt[0].get("n_decoded", 0))
            elif isinstance(nxt, dict):
                decoded = float(nxt.get("n_decoded", 0))
            used += float(slot.get("n_prompt_tokens", 0)) + decoded
    if capacity <= 0:
        raise ValueError("slots report no context")
    return min(1.0, used / capacity), capacity
