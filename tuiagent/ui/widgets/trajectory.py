"""The trajectory of one run, live or replayed: every event drawn in place, pruned branches kept
(collapsed and labelled) beside the path the model kept.

Events come in through :meth:`TrajectoryView.feed` (a method call down from the screen). Tokens are
only buffered there; a timer renders them every ``flush_s`` (50 ms), so a model streaming hundreds
of tokens a second costs at most twenty repaints a second and keys stay responsive.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget

from guards.chain import presenter
from tuiagent.core import events as ev
from tuiagent.core.compare import PruneMark, intervention_label, pruned_parts
from tuiagent.core.context import turn_prose_end
from tuiagent.parsing import final_answer
from tuiagent.ui.widgets.banner import Banner
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.final_answer import FinalAnswer
from tuiagent.ui.widgets.guard_card import GuardCard
from tuiagent.ui.widgets.note_line import NoteLine
from tuiagent.ui.widgets.step_header import StepHeader
from tuiagent.ui.widgets.tool_output import ToolOutput
from tuiagent.ui.widgets.turn_text import TurnText


class TrajectoryView(VerticalScroll, can_focus=True):
    """Scrolls to follow the newest event until the user scrolls up (End follows again)."""

    BINDINGS = [
        Binding("x", "toggle_pruned", "Show/hide pruned"),
        Binding("end", "follow", "Follow", show=False),
    ]

    DEFAULT_CSS = """
    TrajectoryView { height: 1fr; padding-bottom: 1; }
    TrajectoryView:focus { background-tint: $foreground 3%; }
    TrajectoryView > .-hidden { display: none; }
    """

    def __init__(self, *, flush_s: float = 0.05, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.flush_s = flush_s
        self._clear_state()

    def _clear_state(self) -> None:
        self.events: list[ev.Event] = []  # everything but tokens (pruning is folded from them)
        self.gold: str | None = None
        self.mode = "tool"
        self.turn = 0
        self.call: int | None = None
        self.texts: dict[int, TurnText] = {}
        self.prose_ends: dict[int, int] = {}  # turn -> where its prose ends (TurnEnded.prose_end)
        self.headers: dict[int, StepHeader] = {}
        self.items: dict[int, list[Widget]] = {}
        self.born: list[tuple[int, Widget]] = []  # (events seen when it was drawn, widget), in order
        self._shown_until: int | None = None  # replay: the position shown (None: everything)
        self._batch: list[Widget] | None = None  # widgets drawn by load(), mounted together
        self.code: dict[int, CodeBlockView] = {}
        self.outputs: dict[int, ToolOutput] = {}
        self.injected: dict[int, ev.Intervention] = {}  # call -> the fault its output carries
        self.marks: dict[int, PruneMark] = {}
        self.pruned_items: dict[int, list[Widget]] = {}
        self.attempts: list[GuardCard] = []  # cards about answer attempts (marked final or not)
        self.final: FinalAnswer | None = None
        self.problem: NoteLine | None = None
        self._dirty: set[TurnText] = set()
        self._current: Widget | None = None
        self.show_pruned = False
        self.follow = True

    shaded = False  # token confidence drawn (the app's ``shade_tokens``, followed by every trajectory)
    math = True  # math rendered (the app's ``raw_math`` off)

    def on_mount(self) -> None:
        self._timer = self.set_interval(self.flush_s, self.flush, pause=True)
        self.watch(self.app, "shade_tokens", self.set_shaded)
        self.watch(self.app, "raw_math", lambda raw: self.set_math(not raw))

    def set_shaded(self, on: bool) -> None:
        self.shaded = on
        widgets: list[TurnText | CodeBlockView] = [*self.texts.values(), *self.code.values()]
        for widget in widgets:
            widget.set_shaded(on)

    def set_math(self, on: bool) -> None:
        self.math = on
        for text in self.texts.values():
            text.set_math(on)
        for card in self.attempts:
            card.set_math(on)
        if self.problem is not None:
            self.problem.set_math(on)
        if self.final is not None:
            self.final.set_math(on)

    def _maybe_anchor(self) -> None:
        """Follow the newest event, once there is more than fits (anchoring a short trajectory
        would push it to the bottom of the pane)."""
        if self.follow and not self.is_anchored and self.max_scroll_y > 0:
            self.anchor()

    # -- calls down -----------------------------------------------------------------------------

    def reset(self) -> None:
        self.remove_children()
        self._clear_state()
        self.anchor(False)

    def start_stream(self) -> None:
        self._timer.resume()

    def stop_stream(self) -> None:
        self.flush()
        self._timer.pause()
        for text in self.texts.values():
            text.end_stream()

    def flush(self) -> None:
        """Render the tokens buffered since the last flush."""
        if self._dirty:
            for text in self._dirty:
                text.flush()
            self._dirty.clear()
        self._maybe_anchor()

    def load(self, events: Iterable[ev.Event], *, shown_until: int | None = None) -> list[Widget | None]:
        """Draw a whole saved run at once; returns, per event other than a token, the widget that
        shows it (replay uses it). Tokens give the text its probabilities (token confidence).
        ``shown_until``: show only what that many events drew (:meth:`show_until`). The widgets are
        mounted together, once (one by one, a 5,000-event run took seconds)."""
        shown = []
        self._batch = []
        try:
            for e in events:
                widget = self.feed(e)
                if not isinstance(e, ev.TokenDelta):
                    shown.append(widget)
            if shown_until is not None:
                for born, widget in self.born:
                    if born > shown_until:
                        widget.styles.display = "none"
                self._shown_until = shown_until
            self.mount_all(self._batch)
        finally:
            self._batch = None
        self.flush()
        return shown

    def feed(self, e: ev.Event) -> Widget | None:
        """Draw one event; returns the widget that shows it (None for a token or a quiet event)."""
        if isinstance(e, ev.TokenDelta):
            text = self.texts.get(e.turn)
            if text is not None:
                text.append(e.text, e.logprob)
                self._dirty.add(text)
            return None
        self.events.append(e)
        handler = getattr(self, f"_on_{type(e).__name__}", None)
        return handler(e) if handler is not None else None

    # -- one handler per event type -------------------------------------------------------------

    def _on_RunStarted(self, e: ev.RunStarted) -> Widget:
        self.gold, self.mode = e.gold, e.mode
        extra = f"   (gold: {e.gold})" if e.gold else ""
        self.problem = NoteLine(0, "problem", "problem", e.problem.strip() + extra)
        self.problem.set_math(self.math)
        return self._add(self.problem)

    def _on_TurnStarted(self, e: ev.TurnStarted) -> Widget:
        self.flush()
        self.turn, self.call = e.turn, None
        header = self.headers[e.turn] = StepHeader(e.turn, e.context_tokens)
        self._add(header)
        text = self.texts[e.turn] = TurnText(e.turn)
        text.set_shaded(self.shaded)
        text.set_math(self.math)
        self._add(text)
        return header

    def _on_TurnEnded(self, e: ev.TurnEnded) -> Widget | None:
        self.flush()
        text = self.texts.get(e.turn)
        if text is not None:
            text.set_text(e.text)
        self.prose_ends[e.turn] = turn_prose_end(e, self.mode)  # as recorded (loaded turns have it too)
        header = self.headers.get(e.turn)
        if header is not None:
            header.tokens = e.tokens
        return text

    def _on_CodeBlock(self, e: ev.CodeBlock) -> Widget:
        text = self.texts.get(e.turn)
        end = self.prose_ends.get(e.turn)
        tokens = None
        if text is not None and end is not None:  # the code block leaves the turn's prose for its own view
            at = text.text.find(e.code, end)
            if at >= 0:
                tokens = text.tokens.window(at, at + len(e.code))
            text.set_text(text.text[:end])
        self.call = e.call
        view = self.code[e.call] = CodeBlockView(e.turn, e.call, e.code, tokens=tokens)
        view.set_shaded(self.shaded)
        view.set_running()
        return self._add(view, e.turn)

    def _on_ToolResult(self, e: ev.ToolResult) -> Widget:
        view = self.code.get(e.call)
        if view is not None:
            view.set_result(
                executed=e.executed,
                error=e.error,
                timed_out=e.timed_out,
                died=e.died,
                duration_s=e.duration_s,
                error_name=e.error_name,
                shown=e.shown,
            )
        turn = view.turn if view is not None else self.turn
        out = self.outputs[e.call] = ToolOutput(turn, e, injected=self.injected.get(e.call))
        return self._add(out, turn)

    def _on_GuardVerdict(self, e: ev.GuardVerdict) -> Widget | None:
        """Drawn as the guard describes it (``GuardBase.display``): on its code block, as a card, a
        banner or a line; this view knows no guard by name."""
        shown = presenter(e.guard).display(e.record())
        if shown is None:
            return None
        turn = e.turn or self.turn
        if shown.place.startswith("code"):
            call = self.call if shown.call is None else shown.call
            view = self.code.get(call) if call is not None else None
            if view is not None:
                view.set_guard(e.guard, shown)
                return view
        if shown.place == "card":
            text = self.texts.get(turn)
            card = GuardCard(turn, e.guard, shown, answer=final_answer(text.text) if text and shown.attempt else None)
            if shown.attempt:
                card.set_math(self.math)
                self.attempts.append(card)
            return self._add(card, turn)
        banner: Banner | NoteLine
        if shown.place == "banner":
            banner = Banner(turn, shown.title, shown.text)
        else:  # a line (or a block it is about that this view does not hold)
            banner = NoteLine(turn, "verdict", shown.title or f"{e.guard} · {e.action}", shown.text or e.reason)
        banner.sticky = shown.sticky
        return self._add(banner, turn)

    def _on_ContextAppended(self, e: ev.ContextAppended) -> Widget | None:
        if e.kind == "tool":
            return self.outputs.get(self.call) if self.call is not None else None
        return self._add(NoteLine(self.turn, "note", f"↳ {e.source}:", e.text.strip()))

    def _on_ContextPruned(self, e: ev.ContextPruned) -> Widget | None:
        marks = pruned_parts(self.events)
        first = None
        for turn, mark in sorted(marks.items()):
            if turn in self.marks:
                continue
            header = self.headers.get(turn)
            if header is None:
                continue
            self.marks[turn] = mark
            header.set_mark(mark)
            self.pruned_items[turn] = [w for w in self.items.get(turn, []) if self._prunable(w, mark)]
            self._set_collapsed(turn, not self.show_pruned)
            first = first or header
        return first

    def _on_AnswerAttempt(self, e: ev.AnswerAttempt) -> Widget | None:
        if self.attempts and self.attempts[-1].turn == e.turn:
            self.attempts[-1].set_final(e.final)
            return self.attempts[-1]
        return self.texts.get(e.turn)

    def _on_Notice(self, e: ev.Notice) -> Widget:
        return self._add(NoteLine(self.turn, e.level, e.level, e.message))

    def _on_Intervention(self, e: ev.Intervention) -> Widget | None:
        """An injected fault: its output (the next ToolResult of the call) is drawn marked. An edit: what a
        person put in place of the run's own, a line in its step."""
        if e.fault and e.target == "output" and e.call is not None:
            self.injected[e.call] = e
            return None
        title = f"⚡ fault ({e.fault}) by a {e.by}:" if e.fault else f"✎ edited by a {e.by}:"
        was = " ".join(e.replaced.split())
        now = " ".join(e.replacement.split())
        detail = f"{intervention_label(e)} · was {was[:80]!r}" + (f" · now {now[:80]!r}" if now else "")
        return self._add(NoteLine(e.turn, "warning", title, detail), e.turn)

    def _on_GuardToggled(self, e: ev.GuardToggled) -> Widget | None:
        if e.reason == "on at start":
            return None
        state = "on" if e.enabled else "off"
        kind = "warning" if (not e.enabled and e.reason not in ("", "changed during the run")) else "toggle"
        return self._add(NoteLine(self.turn, kind, f"⚙ {e.guard} {state}:", e.reason or "changed"))

    def _on_RunFinished(self, e: ev.RunFinished) -> Widget:
        self.flush()
        self.final = FinalAnswer(e, self.gold)
        self.final.set_math(self.math)
        return self._add(self.final, 10**9)

    # -- pruned branches ------------------------------------------------------------------------

    @staticmethod
    def _prunable(w: Widget, mark: PruneMark) -> bool:
        if getattr(w, "sticky", False) or isinstance(w, StepHeader):
            return False
        if isinstance(w, TurnText):
            return "model" in mark.parts
        return mark.whole

    def _set_collapsed(self, turn: int, collapsed: bool) -> None:
        header = self.headers.get(turn)
        if header is not None:
            header.collapsed = collapsed
        for w in self.pruned_items.get(turn, []):
            w.set_class(collapsed, "-hidden")

    def on_step_header_toggled(self, message: StepHeader.Toggled) -> None:
        header = message.header
        self._set_collapsed(header.turn, not header.collapsed)

    def action_toggle_pruned(self) -> None:
        """Show or hide every pruned branch at once."""
        self.show_pruned = not self.show_pruned
        for turn in self.marks:
            self._set_collapsed(turn, not self.show_pruned)

    def action_follow(self) -> None:
        self.follow = True
        self.scroll_end(animate=False)
        self._maybe_anchor()

    # -- replay ---------------------------------------------------------------------------------

    def show_until(self, position: int) -> None:
        """Show only what the first ``position`` events drew: the run as it stood then (only the
        widgets between the last position and this one change, so a step stays cheap on long runs;
        an inline display style, not a class, so no stylesheet is matched again)."""
        births = [born for born, _ in self.born]
        old = bisect_right(births, self._shown_until) if self._shown_until is not None else len(births)
        new = bisect_right(births, position)
        for _, widget in self.born[min(old, new) : max(old, new)]:
            if new < old:
                widget.styles.display = "none"
            else:
                widget.styles.display = None  # back to what the stylesheet says (a pruned step stays hidden)
        self._shown_until = position

    def highlight(self, widget: Widget | None) -> None:
        """Mark the widget of the current replay event and scroll to it."""
        if self._current is not None:
            self._current.remove_class("-current")
        self._current = widget
        if widget is None:
            return
        turn = getattr(widget, "turn", None)
        if turn in self.marks and widget.has_class("-hidden"):
            self._set_collapsed(turn, False)
        widget.add_class("-current")
        self.follow = False
        self.anchor(False)
        self.call_after_refresh(self.scroll_to_widget, widget, animate=False, top=False)

    # -- helpers --------------------------------------------------------------------------------

    def _add(self, widget: Widget, turn: int | None = None) -> Widget:
        turn = self.turn if turn is None else turn
        self.items.setdefault(turn, []).append(widget)
        self.born.append((len(self.events), widget))
        if self._batch is not None:
            self._batch.append(widget)
        else:
            self.mount(widget)
        if self.follow and not self.is_anchored:
            self.call_after_refresh(self._maybe_anchor)
        return widget

    def text_of_answer(self) -> str | None:
        return self.final.finished.answer if self.final is not None else None

    def code_blocks(self) -> Sequence[CodeBlockView]:
        return list(self.code.values())
