"""Text from engines is text: label values, model names and error texts an engine supplies are
stripped of control characters (ESC, BEL, CSI, OSC, DEL, ...) where they enter, so none reaches a
terminal, stdout, snapshot.md or an SVG. Newlines and tabs stay (escaped label values may hold
them); surfaces that draw one line fold them there."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F: CSI is U+009B)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def printable(text: str) -> str:
    """``text`` with every control character replaced by U+FFFD."""
    return _CONTROL.sub(REPLACEMENT, text) if _CONTROL.search(text) else text
