"""The help screen (``?``)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]inferdeck[/b] — GPU inference node console

[b]Keys[/b]
  ?        this help
  p        pause / resume drawing (polling goes on, history is kept)
  q        quit
  esc      close this screen

[b]Reading the panes[/b]
  Bars are fixed-scale: a full bar is always 100% (memory of its
  device, utilisation, KV cache). n/a means the value could not be
  read; the reason is in the snapshot JSON (`unavailable`).
  GPU utilisation is n/a under MIG: NVML does not report it.
  TTFT95 / ITL95: p95 over the window from histogram bucket deltas,
  as Prometheus' histogram_quantile. A trailing * means the figure
  is since the engine started: one scrape so far, or nothing has
  finished yet in a window that inferdeck has not fully watched.
  ≥ means the rank fell in the +Inf bucket (a lower bound only).
  ⟳ beside a GPU: MIG mode change pending (needs a GPU reset).
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(HELP, id="help-text")
