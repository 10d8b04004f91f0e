"""The help screen (``?``): the keys in two columns (a long description wraps under itself, not
to column 0), the notes on reading the panes, and the keys of the view it was opened from."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

TITLE = "inferdeck — GPU inference node console"

KEYS = [
    ("?", "this help"),
    ("p", "pause / resume drawing (polling goes on, history is kept); in a replay: play / pause"),
    ("w", "window for rates and percentiles: 1m, 5m, 15m"),
    ("v", "budget / SLO / cost pane (short terminals; tall ones show all)"),
    ("s", "save an incident snapshot (md + json + svg)"),
    ("S", "browse the saved snapshots"),
    ("a", "alerts in full: every alert, pending condition and finding, wrapped, with its age"),
    ("F", "findings: what to look at, with evidence and the knob to turn"),
    ("t", "timeline: what happened since the console started, in order, the first sign ▶"),
    ("m", "MIG: each GPU's layout, a new one previewed, then applied (root)"),
    ("+ -", "refresh more / less often (0.5, 1, 2, 5, 10 s)"),
    ("tab", "move between tables"),
    ("enter", "open the selected row's details"),
    ("/", "show only rows with a text (every table); esc shows all"),
    (
        "o > <",
        "sort the focused table by its next (o, >) or previous (<) column, biggest first; O "
        "turns it round; a click on a header sorts by it, a second click reverses",
    ),
    ("q", "quit from the dashboard (also Ctrl-C); in a detail view, back"),
    ("esc", "back from a detail view; close this screen"),
    ("replay", "[ ] step a frame, , . jump 1 min, 1 2 3 play at 1x 10x 60x, g go to a time"),
]

READING = [
    "Bars are fixed-scale: a full bar is always 100% (memory of its device, utilisation, KV "
    "cache). n/a means the value could not be read; the reason is in the snapshot JSON "
    "(`unavailable`).",
    "GPU utilisation is n/a under MIG: NVML does not report it. On Hopper and newer, a MIG row's "
    "Util/Act shows GPM activity instead (graphics activity of its GPU instance, between two "
    "polls): an instance's activity reflects all its compute instances, and SM ratios can pass "
    "100% on instance entities. Ampere and Ada have no GPM (DCGM's profiling metrics cover "
    "them). The GPU detail lists SM, occupancy, tensor, DRAM bandwidth and PCIe figures.",
    "Engines columns: Run and Wait, requests running and waiting (sequences); KV, KV cache use "
    "(% of the pool); tok/s, output tokens a second; Compl%, completion, requests finished "
    "without an error or abort (% of those finished; the SLO pane's Compl%); Req/s, requests "
    "finished a second; Room, requests a second the engine takes above its current rate before "
    "its first SLO breaks, with that SLO (≥ a floor, past the load seen; ? it cannot tell yet: "
    "the engine detail says why); Sat, the saturation index, the worst p90 latency over its SLO "
    "(×; 1 or more is saturated, ↑ while load and TTFT both rise, ± where that p90 lies in a "
    "bucket wider than 1.5×: 0.94×± against a 50 ms SLO in a 25–50 ms bucket is anything from "
    "0.5 to 1, and the detail names it). At 80 columns Room takes "
    "Compl%'s place and shows its rate only.",
    "TTFT p95 / TPOT p95: over the window from histogram bucket deltas, as Prometheus' "
    "histogram_quantile. A trailing * means the figure is since the engine started: one scrape "
    "so far, or nothing has finished yet in a window that inferdeck has not fully watched.",
    "° means the window is not full yet: the figure (and every rate) covers the seconds watched "
    'so far, shown in the header as "window 1m (12s watched)"; JSON gives covered_s.',
    '"age ≤1s" in the header: the oldest engine figures on screen were read that long before '
    "the frame; an engine on its own longer interval, or slow to answer, is named instead "
    '("llama-70b read 14s ago").',
    "≥ means the rank fell in the +Inf bucket (a lower bound only).",
    "± means the bucket holding the figure spans more than 1.5x (its upper bound over its "
    "lower): the truth may be anywhere in it (the detail shows it).",
    "~ approximate; ≈ attainment interpolated between bucket bounds; ·7 only 7 requests stand "
    "behind the figure (dimmed under 20). A cell ending in … left a mark out for room (± or ~ "
    "first, never the count): the detail shows them all.",
    "Windows hold the scrapes of the last W seconds, as a Prometheus range; rates are "
    "Prometheus' rate() (each series on its own).",
    "⟳ beside a GPU: MIG mode change pending (needs a GPU reset).",
    "↪ before an engine's name: its URL redirected to another host, whose page is shown (the "
    "engine's detail names the host).",
    "A MIG re-cut holds its GPU's lock (a second one, from another console or the CLI, is "
    "refused with the holder's pid, command and start) and finishes before q, Ctrl-C or SIGTERM "
    "quit. Every step is in the MIG journal before it is taken.",
    'Recovering an interrupted re-cut (killed, power lost), step by step: 1. the finding "MIG '
    're-cut interrupted" (F; check and snapshots say it too) names the GPU and the layout it is '
    "in: the new one (made, record open: info), the old one (nothing took effect: warning) or "
    "neither (critical: a slice may have no MIG device). 2. Press m; the GPU reads RE-CUT "
    "INTERRUPTED; pick it. 3. The layout that brings it to a recorded state is preselected (the "
    "target, or the previous layout if it was rolling back): read the preview. 4. Press a, type "
    "the GPU index. The apply converges from what is there (a missing compute instance is "
    "re-created), checks each slice has its MIG device, and closes the interrupted record. "
    "From a shell: inferdeck mig show prints the same apply command.",
    'Budget cells: what is left before the plan\'s budget ("5.2G left", "1.5 over"), the queue '
    "as requests waiting. Their bars fill as the room is used, like the GPU pane's: half full at "
    "the plan's margin (memory margin, planned sequences, the power and thermal warning "
    "distances), full with nothing left.",
    "A pane title says how its rows are sorted, how many the filter hides and how many the "
    'terminal cuts off, above and below ("2 more ↑, 3 more ↓, scroll").',
    "On a tall terminal with up to 4 engines, the space left shows their TTFT p95, queue and KV "
    "use over 15 minutes (every 10 s).",
]


def _keys(rows: list[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=2)
    grid.add_column(no_wrap=True, min_width=8)
    grid.add_column(ratio=1)
    for key, what in rows:
        grid.add_row("", key, what)
    return grid


def _notes(paragraphs: list[str]) -> Table:
    grid = Table.grid(padding=(0, 0))
    grid.add_column(width=2)
    grid.add_column(ratio=1)
    for p in paragraphs:
        grid.add_row("", p)
    return grid


def plain(
    keys: list[tuple[str, str]],
    general: list[tuple[str, str]] | None = None,
    notes: list[str] | None = None,
) -> str:
    """The help as plain lines (what the grid draws, unwrapped): for tests and the record."""
    general = KEYS if general is None else general
    notes = READING if notes is None else notes
    out = [TITLE, ""]
    if general:
        out += ["Keys"] + [f"  {k:<8} {w}" for k, w in general]
    out += ["", "Reading the panes"] + [f"  {p}" for p in notes]
    if keys:
        out += ["", "Keys of this view"] + [f"  {k:<10} {w}" for k, w in keys]
    return "\n".join(out) + "\n"


class HelpScreen(ModalScreen[None]):
    """The help, and the keys of the view it was opened from (read from that view's bindings);
    arrows, PageUp/PageDown, Home/End scroll it."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(
        self,
        keys: list[tuple[str, str]] | None = None,
        general: bool = True,
        notes: list[str] | None = None,
    ) -> None:
        """``general``: the node console's keys and notes first (the fleet has its own)."""
        super().__init__()
        self.keys = keys or []
        self.general, self.notes = general, notes or []
        self.text = plain(self.keys) if general else plain(self.keys, [], self.notes)

    def compose(self) -> ComposeResult:
        parts: list[RenderableType] = [Text(TITLE, style="bold"), Text("")]
        if self.general:
            parts += [Text("Keys", style="bold"), _keys(KEYS), Text("")]
        parts += [
            Text("Reading the panes", style="bold"),
            _notes(READING if self.general else self.notes),
        ]
        if self.keys:
            parts += [Text(""), Text("Keys of this view", style="bold"), _keys(self.keys)]
        with VerticalScroll(id="help-box"):
            yield Static(Group(*parts), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-box", VerticalScroll).focus()
