"""Incident snapshot prompt, the snapshot browser, and the replay seek prompt."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Input, Static

from screens.widgets import KeyBar, Quiet


class PromptScreen(ModalScreen[str | None]):
    """One line of text; enter returns it (empty is fine), esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "Input"

    def __init__(self, title: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Static(self.title_text, id="prompt-title", markup=False)
            yield Input(self.value, placeholder=self.placeholder, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class MarkdownScreen(Screen[None]):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            text = f"Cannot read {self.path}: {exc.strerror}."
        from textual.widgets import MarkdownViewer  # loaded when a snapshot is opened

        yield MarkdownViewer(text, show_table_of_contents=False)
        yield KeyBar()


class SnapshotBrowser(Screen[None]):
    """Saved bundles (time, note, alert count); enter opens one's Markdown."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back")]

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        yield Static(f"Snapshots in {self.root}", id="browser-title", markup=False)
        yield DataTable(id="bundles", cursor_type="row")
        yield KeyBar()

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("taken at (UTC)", "host", "alerts", "note"):
            t.add_column(label)
        from console.out.bundle import list_bundles

        bundles = list_bundles(self.root)
        for b in bundles:
            t.add_row(
                (b["taken_at"] or "?")[:19],
                b["host"] or "?",
                str(b["alerts"]),
                b["note"],
                key=str(b["path"]),
            )
        if not bundles:
            self.query_one("#browser-title", Static).update(
                f"No snapshots in {self.root} yet: press s on the dashboard."
            )
        t.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.push_screen(MarkdownScreen(Path(str(event.row_key.value)) / "snapshot.md"))
