"""Secrets never leave inferdeck: bearer tokens, URL passwords and secret-looking process
arguments are replaced by *** in everything written (bundles, recordings)."""

from __future__ import annotations

import re

MASK = "***"
_PATTERNS = [
    # --api-key X, --token=X, --hf-token X, --password X, --secret X (also in JSON-escaped command lines)
    (
        re.compile(
            r"(--?(?:[a-z0-9]+[-_])*(?:api[-_]?key|token|password|passwd|secret|credentials?))((?:[= ]|&#160;)+)"
            r"(?!\*\*\*)([^\s\"',&<]+)",
            re.I,
        ),
        r"\1\2" + MASK,
    ),
    # key=value and key: value forms
    (
        re.compile(
            r"\b((?:[a-z0-9]+_)*(?:api_?key|token|password|passwd|secret|access_key))(=|: ?)(?!\*\*\*)([^\s\"'&,;]+)",
            re.I,
        ),
        r"\1\2" + MASK,
    ),
    # Authorization: Bearer X
    (re.compile(r"(Bearer\s+)(?!\*\*\*)[A-Za-z0-9._~+/=-]+"), r"\1" + MASK),
    # ?token=X, &key=X in a URL's query
    (
        re.compile(
            r"([?&](?:token|key|api_?key|access_token|auth|password|secret|sig|signature)=)"
            r"(?!\*\*\*)([^&\s\"'#<]+)",
            re.I,
        ),
        r"\1" + MASK,
    ),
    # scheme://user:password@host
    (re.compile(r"(://[^/\s:@\"']+:)[^@\s/\"']+@"), r"\1" + MASK + "@"),
]


def redact(text: str, secrets: list[str] | None = None) -> str:
    """Mask secret-looking values, and every known secret (e.g. configured tokens) verbatim."""
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    for secret in secrets or []:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text


_FLAG_VALUE = re.compile(
    r"--?(?:[a-z0-9]+[-_])*(?:api[-_]?key|token|password|passwd|secret|credentials?)[= ]+([^\s\"',]+)",
    re.I,
)


def secrets_in(texts: list[str]) -> list[str]:
    """Values of secret-looking flags in command lines, to mask verbatim wherever they appear
    (an SVG splits text into spans, where the flag and its value no longer stand side by side)."""
    out = []
    for text in texts:
        out += [m.group(1) for m in _FLAG_VALUE.finditer(text) if m.group(1) != MASK]
    return out
