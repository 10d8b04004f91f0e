"""The MIG menu (``m``): pick a GPU and a target layout, see the preview (what is destroyed and
created, where planned services land and whether they fit, the nvidia-smi equivalent, what
blocks the change), confirm by typing the GPU index, and watch the apply step by step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Static

from console.mig.layouts import MigError, describe, diff, parse_layout, placements, valid_layouts
from console.mig.preview import capacity_there, landing, measured_on
from console.mig.script import nvidia_smi
from screens.widgets import DeckScreen, KeyBar, Quiet, theme_colors

if TYPE_CHECKING:  # the manager drives NVML: screens only hold it
    from console.figures.plan import Plan
    from console.mig.layouts import Instance
    from console.mig.manager import ApplyReport, GpuMig, MigManager, Recovery


class ConfirmApply(ModalScreen[bool]):
    """k9s-style: Cancel is the default; applying needs the GPU index typed."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#confirm-input"  # empty + enter, or esc, cancels: Cancel is the default

    def __init__(self, gpu: int, summary: str) -> None:
        super().__init__()
        self.gpu = gpu
        self.summary = summary

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(
                Text.assemble(
                    ("Change the MIG layout of GPU ", "bold"),
                    (str(self.gpu), "bold"),
                    f"\n{self.summary}\n\nType {self.gpu} and press enter to apply.",
                )
            )
            yield Input(placeholder=f"type {self.gpu}", id="confirm-input")
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Apply", id="apply", variant="error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() == str(self.gpu))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.dismiss(self.query_one("#confirm-input", Input).value.strip() == str(self.gpu))
        else:
            self.dismiss(False)

    def action_cancel(self) -> None:
        self.dismiss(False)


class MigScreen(DeckScreen):
    BINDINGS = [
        Binding("escape,q", "back", "Back"),
        Binding("a", "apply", "Apply"),
        Binding("c", "copy", "Copy the commands"),
        # the preview below the lists is taller than a short terminal: paged whatever is focused
        Binding("pagedown", "page(1)", "Preview down", show=False, priority=True),
        Binding("pageup", "page(-1)", "Preview up", show=False, priority=True),
    ]

    def __init__(self, manager: MigManager, plan: Plan, commands: dict[int, str]) -> None:
        super().__init__()
        self.manager = manager
        self.plan = plan
        self.commands = commands
        self.gpu: int | None = None
        self.state: GpuMig | None = None
        self.layouts: list[list[Instance]] = []
        self.target: list[Instance] | str | None = None
        self.busy = False

    def compose(self) -> ComposeResult:
        yield Quiet(id="status")  # the header, as on the dashboard
        with Horizontal(id="mig-top"):
            yield DataTable(id="mig-gpus", cursor_type="row")
            yield DataTable(id="mig-layouts", cursor_type="row")
        with VerticalScroll(id="mig-bottom"):
            yield Static(id="mig-current", markup=False)
            yield Static(id="mig-preview", markup=False)
            yield Static(id="mig-log", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        gpus = self.query_one("#mig-gpus", DataTable)
        gpus.add_column("GPU", key="gpu")
        gpus.add_column("Layout", key="layout")
        self.query_one("#mig-layouts", DataTable).add_column("Target layout", key="layout")
        self.query_one("#mig-current", Static).update("Reading MIG state…")
        self._load_gpus()

    @work(thread=True, exit_on_error=False)
    def _load_gpus(self) -> None:
        rows = []
        try:
            interrupted = {r.index for r in self.manager.recoveries()}
        except MigError:
            interrupted = set()
        try:
            count = self.manager.count()
        except MigError as exc:
            self.app.call_from_thread(self.query_one("#mig-current", Static).update, str(exc))
            return
        for i in range(count):
            try:
                g = self.manager.read(i)
            except MigError as exc:
                rows.append((i, f"{exc}"))
                continue
            except Exception as exc:  # noqa: BLE001
                rows.append((i, f"unreadable ({type(exc).__name__})"))
                continue
            mode = describe(g.layout) if g.mode_current else "MIG off"
            if g.mode_pending != g.mode_current:
                mode += " (mode change pending)"
            if i in interrupted:
                mode = f"RE-CUT INTERRUPTED: {mode}"
            rows.append((i, mode))
        self.app.call_from_thread(self._fill_gpus, rows)

    def _fill_gpus(self, rows: list[tuple[int, str]]) -> None:
        t = self.query_one("#mig-gpus", DataTable)
        t.clear()
        for i, text in rows:
            t.add_row(str(i), text, key=str(i))
        if self.gpu is None:  # the first reading; after an apply the GPU picked stays picked
            t.focus()
            self.query_one("#mig-current", Static).update(
                "Pick a GPU (enter), then a target layout."
            )
        else:
            t.move_cursor(row=t.get_row_index(str(self.gpu)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "mig-gpus":
            self.gpu = int(str(event.row_key.value))
            self._load_gpu(self.gpu)
        elif event.data_table.id == "mig-layouts" and self.state is not None:
            key = str(event.row_key.value)
            self.target = key if key in ("disable", "enable") else self.layouts[int(key)]
            self._preview()

    @work(thread=True, exit_on_error=False)
    def _load_gpu(self, index: int) -> None:
        try:
            g = self.manager.read(index)
            recovery = next((r for r in self.manager.recoveries() if r.index == index), None)
        except MigError as exc:
            self.app.call_from_thread(self.query_one("#mig-current", Static).update, str(exc))
            return
        self.app.call_from_thread(self._show_gpu, g, recovery)

    def _show_gpu(self, g: GpuMig, recovery: Recovery | None = None) -> None:
        self.state = g
        t = self.query_one("#mig-layouts", DataTable)
        t.clear()
        self.layouts = valid_layouts(g.spec) if g.spec is not None else []
        if g.mode_current:
            for i, layout in enumerate(self.layouts):
                mark = "● " if sorted(layout) == sorted(g.layout) else "  "
                t.add_row(f"{mark}{describe(layout)}  [{placements(layout)}]", key=str(i))
            t.add_row("  disable MIG", key="disable")
        else:
            t.add_row("  enable MIG", key="enable")
        text = Text()
        text.append(f"GPU {g.index} {g.model.name if g.model else ''}: ", style="bold")
        text.append(
            f"MIG {'on' if g.mode_current else 'off'}; {describe(g.layout)}  "
            f"(profiles and placements from the {g.spec_source})\n"
        )
        services = {s.device: s.name for s in self.plan.services} if self.plan else {}
        for name, start in g.layout:
            procs = g.processes.get((name, start), [])
            svc = services.get(f"{g.index}:{name}@{start}")
            text.append(f"  {name}@{start}")
            text.append(f"   service {svc}" if svc else "   no planned service")
            text.append(f"   processes: {', '.join(str(p) for p in procs)}\n" if procs else "\n")
        if g.bare:
            text.append(
                f"  no compute instance (no MIG device) on {placements(g.bare)}\n",
                style=theme_colors(self.app.theme_variables)["error"],
            )
        self.query_one("#mig-current", Static).update(text)
        self.query_one("#mig-preview", Static).update("")
        t.focus()
        if recovery is not None:
            self._offer(g, recovery, text)

    def _offer(self, g: GpuMig, recovery: Recovery, text: Text) -> None:
        """An interrupted re-cut on this GPU: say which layout it is in, and preselect the apply
        that brings it to a recorded one (preview and typed confirmation, as for any apply)."""
        c = theme_colors(self.app.theme_variables)
        text.append(
            f"\nInterrupted re-cut: {recovery.sentence}\n",
            style=c["error"] if recovery.state == "neither" else c["warning"],
        )
        try:
            target = parse_layout(recovery.target, g.spec) if g.spec is not None else None
        except MigError:
            target = None
        if target is None:
            text.append(f"  bring it to a recorded layout with: {recovery.command}\n")
            self.query_one("#mig-current", Static).update(text)
            return
        text.append(
            "  preselected below: the apply that brings it to a recorded layout "
            f"({recovery.target}); it reads the GPU back and closes the record.\n"
        )
        self.query_one("#mig-current", Static).update(text)
        self.target = target
        if isinstance(target, list):
            rows = [i for i, L in enumerate(self.layouts) if sorted(L) == sorted(target)]
            if rows:
                self.query_one("#mig-layouts", DataTable).move_cursor(row=rows[0])
        self._preview()

    def _preview(self) -> None:
        g, target = self.state, self.target
        assert g is not None and target is not None
        c = theme_colors(self.app.theme_variables)
        t = Text()
        t.append("Preview\n", style="bold")
        if isinstance(target, list):
            keep, destroy, create = diff(g.layout, target)
            t.append(f"  keep     {placements(keep) or '-'}\n")
            t.append(
                f"  destroy  {placements(destroy) or '-'}\n", style=c["warning"] if destroy else ""
            )
            t.append(f"  create   {placements(create) or '-'}\n")
        else:
            t.append(
                f"  {target} MIG mode"
                + (" (every instance is destroyed first)\n" if target == "disable" else "\n")
            )
        measured = measured_on(self.deck.frame)
        for land in landing(self.plan, g, target, measured) if self.plan else []:
            if land["lands_on"] is None or not land["fits"]:
                t.append(f"  ! {land['warning']}\n", style=c["warning"])
            else:
                t.append(
                    f"  {land['service']} lands on {land['lands_on']}: needs {land['required_gib']:.1f} of "
                    f"{land['capacity_gib']:.1f} GiB, headroom {land['headroom_gib']:.1f} GiB\n"
                )
                t.append(f"    capacity there: {capacity_there(land.get('capacity'))}\n")
        t.append("  equivalent nvidia-smi:\n", style=c["dim"])
        for cmd in nvidia_smi(g.index, g.layout, target, g.profile_ids, g.gi_ids):
            t.append(f"    $ {cmd}\n", style=c["dim"])
        for note in self.manager.reset_notes(g, target):
            t.append(f"  note: {note}\n", style=c["warning"])
        problems = self.manager.precheck(g, target, self.deck.read_only, self.commands)
        if problems:
            t.append("Blocked:\n", style=f"bold {c['error']}")
            for p in problems:
                t.append(f"  {p}\n", style=c["error"])
        else:
            t.append("Press a to apply (you will type the GPU index to confirm).", style="bold")
        self.query_one("#mig-preview", Static).update(t)

    def action_apply(self) -> None:
        g, target = self.state, self.target
        if g is None or target is None or self.busy:
            self.notify("Pick a GPU and a target layout first.", severity="warning", markup=False)
            return
        problems = self.manager.precheck(g, target, self.deck.read_only, self.commands)
        if problems:
            self.notify(problems[0], severity="error", timeout=8, markup=False)
            return
        summary = (
            f"{describe(g.layout)}  ->  {target if isinstance(target, str) else describe(target)}"
        )

        def confirmed(ok: bool | None) -> None:
            if ok:
                self._apply(g.index, target)
            else:
                self.notify("Cancelled: nothing changed.", markup=False)

        self.app.push_screen(ConfirmApply(g.index, summary), confirmed)

    @work(thread=True, exit_on_error=False)
    def _apply(self, index: int, target: list[Instance] | str) -> None:
        self.busy = True
        log: list[str] = []

        def progress(msg: str) -> None:
            log.append(msg)
            self.app.call_from_thread(
                self.query_one("#mig-log", Static).update, "\n".join(log[-12:])
            )

        try:
            report = self.manager.apply(index, target, progress, self.deck.read_only, self.commands)
        except MigError as exc:
            self.app.call_from_thread(
                self.notify, str(exc), severity="error", timeout=10, markup=False
            )
            self.busy = False
            return
        finally:
            self.busy = False
        self.app.call_from_thread(self._done, index, report)

    def _done(self, index: int, report: ApplyReport) -> None:
        ok = report.result == "applied"
        text = f"{report.result}: {report.before} -> {report.after}"
        if report.error:
            text += f"\nfailure: {report.error}"
        if report.next:
            text += f"\nnext: {report.next}"
        self.query_one("#mig-log", Static).update(text)
        self.notify(
            text.splitlines()[0],
            severity="information" if ok else "error",
            timeout=10,
            markup=False,
        )
        self.deck.forget_mig(index)
        self._load_gpus()  # the list says what each GPU holds now
        self._load_gpu(index)

    def action_copy(self) -> None:
        """The preview's nvidia-smi commands on the clipboard (OSC 52), for a change ticket."""
        g, target = self.state, self.target
        if g is None or target is None:
            self.notify("Pick a GPU and a target layout first.", severity="warning", markup=False)
            return
        commands = nvidia_smi(g.index, g.layout, target, g.profile_ids, g.gi_ids)
        self.app.copy_to_clipboard("\n".join(commands) + "\n")
        said = f"{len(commands)} nvidia-smi commands copied to the clipboard (OSC 52)."
        self.notify(said, markup=False)
        log = self.query_one("#mig-log", Static)
        log.update(said)  # in the view too, brought into sight
        self.call_after_refresh(log.scroll_visible, animate=False)

    def action_page(self, step: int) -> None:
        box = self.query_one("#mig-bottom", VerticalScroll)
        (box.scroll_page_down if step > 0 else box.scroll_page_up)(animate=False)

    def action_back(self) -> None:
        if not self.busy:
            self.app.pop_screen()
