"""Prometheus text exposition parser (format 0.0.4, and the OpenMetrics-ish pages engines serve).

Tolerant by design: a line that cannot be read is counted in ``Page.bad_lines`` and skipped, so
one broken series never hides the rest of a page. Bounded by design: a page holding more series
than ``max_series`` (of the families kept), or a series whose label set is longer than
``max_label_chars``, stops the parse with ``Page.over_limit`` saying which limit and how to raise
it, so a hostile page costs its size, not hundreds of times that. ``*_created`` series are dropped (they are
timestamps that prometheus_client adds, not observations).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from console.safetext import printable

Labels = tuple[tuple[str, str], ...]
Vector = Sequence[float]  # a series' samples over a scrape: a tuple, or an array("d") as kept

_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_SPECIAL = {
    "nan": math.nan,
    "-nan": math.nan,
    "+nan": math.nan,
    "-nan(ind)": math.nan,
    "nan(ind)": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
}


@dataclass(slots=True)
class Page:
    """Samples of one scrape: metric name -> list of (labels, value)."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    bad_lines: int = 0
    first_bad_line: int | None = None
    skipped: int = 0  # samples left out by the keep filter or as *_created
    skipped_names: dict[str, str] = field(default_factory=dict)  # name -> first line's label text
    over_limit: str | None = None  # the budget the page broke (the parse stopped there)
    series: int = 0  # samples kept

    def names(self) -> set[str]:
        return set(self.samples)

    def get(self, name: str) -> list[tuple[Labels, float]]:
        return self.samples.get(name, [])

    def __len__(self) -> int:
        return sum(len(v) for v in self.samples.values())


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        special = _SPECIAL.get(text.lower())
        if special is None:
            raise
        return special


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=8192)
def _parse_labels(body: str) -> Labels | None:
    """A label set (memoised: an engine's label sets are the same scrape after scrape)."""
    if not body.strip():
        return ()
    labels: list[tuple[str, str]] = []
    pos = 0
    end = len(body)
    while pos < end:
        m = _LABEL_RE.match(body, pos)
        if m is None:
            return None
        labels.append((m.group(1), printable(_unescape(m.group(2)))))
        pos = m.end()
        if m.group(3) == "" and pos < end and body[pos:].strip():
            return None
    return tuple(labels)


def _close_brace(line: str, start: int) -> int:
    """Index of the '}' closing the label set that opens at ``start``, honouring quotes."""
    simple = line.find("}", start)
    if simple < 0:
        return -1
    if line.count('"', start, simple) % 2 == 0 and "\\" not in line[start:simple]:
        return simple
    in_quote = False
    i = start + 1
    n = len(line)
    while i < n:
        ch = line[i]
        if in_quote:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_quote = False
        elif ch == '"':
            in_quote = True
        elif ch == "}":
            return i
        i += 1
    return -1


MAX_SERIES = 50_000  # samples kept from one page (families a profile reads)
MAX_LABEL_CHARS = 16_384  # one series' label set, as written on the page


# what a family name is to the parser: kept, skipped (not needed, or a *_created series), or not
# a valid name; decided once per name, as a page repeats its names line after line
_KEEP, _SKIP, _BAD = 0, 1, 2


# a series' name and labels by its line's text up to the closing '}', across pages: an engine
# writes the same series scrape after scrape (bounded: series of up to 512 characters, emptied
# when 16,384 are kept, a few MB at most whatever a page holds)
# (labels None: a series of a family skipped when it was seen, its labels never read)
_HEADS: dict[str, tuple[str, Labels | None, int]] = {}  # text -> name, labels, their characters
_HEADS_KEPT = 16_384
_HEAD_CHARS = 512


def _remember(head: str, known: tuple[str, Labels | None, int]) -> None:
    if len(_HEADS) >= _HEADS_KEPT:
        _HEADS.clear()
    _HEADS[head] = known


def _decide(name: str, keep: Callable[[str], bool] | None) -> int:
    if not _NAME_RE.match(name):
        return _BAD
    if name.endswith("_created") or (keep is not None and not keep(name)):
        return _SKIP
    return _KEEP


def _too_many(text: str, max_series: int) -> str:
    return (
        f"the page holds more than {max_series:,} series ({text.count(chr(10)) + 1:,} "
        f"lines); limit {max_series:,}: raise scrape.max_series"
    )


_CHUNK = 1 << 16  # characters split into lines at a time


def _lines(text: str) -> Iterator[str]:
    """The page's lines ('\n' ends one), split a chunk at a time: at the speed of str.split,
    and a page of a million one-character lines never stands as a million strings at once."""
    pos, size = 0, len(text)
    while pos < size:
        cut = text.find("\n", pos + _CHUNK)
        if cut < 0:
            cut = size
        yield from text[pos:cut].split("\n")
        pos = cut + 1


def parse(
    text: str,
    keep: Callable[[str], bool] | None = None,
    max_series: int = MAX_SERIES,
    max_label_chars: int = MAX_LABEL_CHARS,
) -> Page:
    """Parse an exposition page. ``keep(name)`` may skip families nobody needs (faster)."""
    page = Page()
    samples = page.samples
    types = page.types
    names: dict[str, int] = {}
    labels_of = _parse_labels
    heads = _HEADS
    series = 0
    for lineno, line in enumerate(_lines(text), 1):
        if not line:
            continue
        if line[0] != "#":
            # a series seen on an earlier page, known by its text up to the last '}' (a value
            # holds none); its value alone after it (float() passes over the spaces and a '\r')
            last = line.rfind("}")
            known = heads.get(line[: last + 1])
            if known is not None:
                name = known[0]
                state = names.get(name)
                if state is None:
                    state = names[name] = _decide(name, keep)
                if state == _SKIP and name in page.skipped_names:
                    page.skipped += 1
                    continue
            if (
                known is not None
                and state == _KEEP
                and known[1] is not None
                and known[2] <= max_label_chars
            ):
                try:
                    value = float(line[last + 1 :])
                except ValueError:
                    pass  # a timestamp, an engine's own NaN, no value: the rest of the way below
                else:
                    series += 1
                    if series > max_series:
                        page.over_limit = _too_many(text, max_series)
                        break
                    bucket = samples.get(name)
                    if bucket is None:
                        samples[name] = [(known[1], value)]
                    else:
                        bucket.append((known[1], value))
                    continue
            line = line.strip(" \t\r")
            if not line:
                continue
        if line[0] == "#":
            if "TYPE" in line:  # HELP lines and other comments are left at that
                parts = line.split(None, 3)
                if len(parts) >= 4 and parts[1] == "TYPE":
                    types[parts[2]] = parts[3].strip().lower()
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace].rstrip()
        else:
            head = line.split(None, 1)
            if not head:
                continue
            name = head[0]
        state = names.get(name)
        if state is None:
            state = names[name] = _decide(name, keep)
        if state == _SKIP:
            # a family nobody reads: skipped before its labels are tokenised
            page.skipped += 1
            close = _close_brace(line, brace) if brace >= 0 else -1
            if name not in page.skipped_names:
                body = line[brace + 1 : close] if close >= 0 else ""
                page.skipped_names[name] = body[:max_label_chars]
            if 0 <= close < _HEAD_CHARS and line[: close + 1] not in heads:
                _remember(line[: close + 1], (name, None, close - brace - 1))
            continue
        if state == _BAD:
            page.bad_lines += 1
            page.first_bad_line = page.first_bad_line or lineno
            continue
        if brace >= 0:
            close = line.find("}", brace)
            if close < 0 or line.count('"', brace, close) % 2 or line.find("\\", brace, close) >= 0:
                close = _close_brace(line, brace)  # a quoted '}' or an escape: walk the quotes
            if close < 0:
                page.bad_lines += 1
                page.first_bad_line = page.first_bad_line or lineno
                continue
            if close - brace - 1 > max_label_chars:
                page.over_limit = (
                    f"line {lineno}: {name} has a label set of {close - brace - 1:,} characters; "
                    f"limit {max_label_chars:,}: raise scrape.max_label_chars"
                )
                break
            rest = line[close + 1 :].split()
        else:
            rest = line.split()[1:]
        if not rest:
            page.bad_lines += 1
            page.first_bad_line = page.first_bad_line or lineno
            continue
        try:
            value = float(rest[0])
        except ValueError:
            try:
                value = parse_float(rest[0])  # NaN and Inf as engines spell them
            except ValueError:
                page.bad_lines += 1
                page.first_bad_line = page.first_bad_line or lineno
                continue
        if brace >= 0:
            labels = labels_of(line[brace + 1 : close])
            if labels is None:
                page.bad_lines += 1
                page.first_bad_line = page.first_bad_line or lineno
                continue
            if close < _HEAD_CHARS:
                _remember(line[: close + 1], (name, labels, close - brace - 1))
        else:
            labels = ()
        series += 1
        if series > max_series:
            page.over_limit = _too_many(text, max_series)
            break
        bucket = samples.get(name)
        if bucket is None:
            samples[name] = [(labels, value)]
        else:
            bucket.append((labels, value))
    page.series = series
    return page


def label(labels: Labels, key: str) -> str | None:
    for k, v in labels:
        if k == key:
            return v
    return None


def without(labels: Labels, *keys: str) -> Labels:
    return tuple((k, v) for k, v in labels if k not in keys)
