"""TIM: Tool-Induced Myopia ("From Proof to Program", arXiv 2511.10899).

Two parts: the paper's section 6.1 prompt mitigation (a sentence in the model's own voice right
after the problem; off by default [ours]) and our myopia monitor at the end of a run (three
indicators over the model's prose, a 0-3 score, a flag at ``flag_at``; defined in
:mod:`guards.tim.monitor`). The monitor reads the whole trajectory (``RunView.trajectory``, pruned
text included) with the same function as the eval's ``tim_flag``, so the two agree on every run.
Details and constants: docs/papers/tim.md#tim-monitor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypedDict

from guards.base import GuardBase, setting, verdict_data
from guards.tim.monitor import NO_DERIVATION, PHRASES, READ_OFF, Reading, gold_output_ignored, monitor
from tuiagent.protocol import FLAG, INJECT, PASS, Display, Line, RunRecord, RunView, Span, Verdict, VerdictRecord

# The mitigation sentence. [paper] section 6.1, verbatim: "after each problem statement, we inject
# the following instruction as a model-generated message". [ours] tuiagent's earlier wording, in
# the model's first person (setting wording = "ours").
PROMPTS = {
    "paper": (
        "We should treat code snippets and their execution results only as helpful hints, and derive "
        "the solution through mathematical reasoning."
    ),
    "ours": (
        "Before I start: code and its results are only helpful hints for me; I must derive the "
        "solution itself by mathematical reasoning."
    ),
}
Wording = Literal["paper", "ours"]


class PrecursorData(TypedDict):
    """A precursor phrase and where it stands (``guards.tim.monitor.Precursor``)."""

    category: str
    phrase: str
    turn: int  # the generated turn it is in (1 = the first)
    after_call: int  # it follows the output of this call (0: before any call ran)


class TIMData(TypedDict, total=False):
    """The data of TIM's verdicts: the prompt mitigation (``on_start``: ``prompt``, ``wording``) or the
    monitor at the end of the run (``on_finish``: the rest; see ``guards.tim.monitor.Reading``)."""

    prompt: bool
    wording: str
    flagged: bool
    score: int  # indicators present, 0-3
    level: str  # none, weak, moderate, strong (by score)
    indicators: list[str]  # the indicators present, by name
    precursors: list[PrecursorData]  # the phrases in the prose and where they stand
    categories: list[str]  # precursor-phrase categories matched
    phrases: list[str]  # the matched phrases, in order
    tool_calls: int  # executed calls
    computation_call: int | None  # the call whose output the answer rests on (the last successful one)
    answer_call: int | None  # that call, when the answer repeats its output
    words_before: int  # derivation words before that output
    words_after: int  # derivation words between that output and the final \boxed{}
    derived: str  # where a derivation stands relative to that computation: before, after, both, none
    # records written before the graded monitor: answer_from_tool (the answer repeated the last
    # output with fewer than min_words_after words of any text after it), words_after_output
    answer_from_tool: bool
    words_after_output: int | None


def _where(p: PrecursorData) -> str:
    return f"turn {p['turn']}, " + ("before any call" if p["after_call"] == 0 else f"after call {p['after_call']}")


def _quoted(phrases: list[str], where: list[str] | None = None) -> list[Span]:
    spans: list[Span] = []
    for n, p in enumerate(phrases):
        spans += [Span("; ")] if n else []
        spans.append(Span(f"“{p}”", "italic"))
        spans += [Span(f" ({where[n]})", "muted")] if where else []
    return spans


def _reason(r: Reading) -> str:
    if not r.tool_calls:
        return f"{r.level} ({r.score}/3): no tool call ran"
    at = f"call {r.computation_call}'s output" if r.computation_call else "the calls (none succeeded)"
    parts = [
        f"{'no derivation' if NO_DERIVATION in r.indicators else 'derivation ' + r.derived}: "
        f"{r.words_before} words before {at}, {r.words_after} after"
    ]
    if r.answer_call:
        parts.append(
            f"{'answer read off' if READ_OFF in r.indicators else 'answer repeats'} call {r.answer_call}'s "
            f"output ({r.tool_calls} calls)"
        )
    if r.precursors:
        parts.append("precursor phrases: " + "; ".join(r.categories))
    return f"{r.level} ({r.score}/3): " + "; ".join(parts)


def _legacy_card(d: TIMData) -> Display:
    """A verdict recorded before the graded monitor, shown as it was then."""
    if not d.get("flagged"):
        return Display(
            "card", title="TIM", lines=((Span("TIM ", "bold"), Span("✓ no sign of tool-induced myopia", "ok")),)
        )
    lines: list[Line] = [
        (
            Span("TIM ", "bold"),
            Span("⚑ tool-induced myopia flagged", "bold warn"),
            Span(" (a hint, not proof)", "muted"),
        )
    ]
    if d.get("answer_from_tool"):
        words: int | None = d.get("words_after_output")
        lines.append((Span(f"answer repeats the last tool output with {words} words of derivation after it", "warn"),))
    phrases: list[str] = d.get("phrases") or []
    if phrases:
        lines.append((Span("phrases: ", "muted"), *_quoted(phrases)))
    return Display("card", title="TIM", lines=tuple(lines), flagged=True)


class TIM(GuardBase):
    """TIM: prompt against tool-induced myopia and a graded monitor for its signs (arXiv 2511.10899)."""

    name: ClassVar[str] = "tim"
    paper_reading = {"wording": "paper"}
    order: ClassVar[int] = 50
    main_settings = ("monitor", "prompt", "wording")
    # the cheap flag for ATTC's "tool ignored" (the key stays, so older results read); guards.attc.audit judges it
    summary = (("tool_ignored", "last out = gold, wrong"), ("tim_flag", "TIM flags"))

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        d = verdict_data(v, TIMData)
        phrases: list[str] = d.get("phrases") or []
        level: str | None = d.get("level")
        head = ("flagged" if d.get("flagged") else "clean") + (f" ({level})" if level else "")
        return head + (f": {', '.join(phrases[:2])}" if phrases else "")

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """At the end of the run: a card with the signal and its evidence (derivation, the answer's
        relation to the tool, the phrases and where they stand), flagged or not."""
        if v.hook != "on_finish":
            return super().display(v)
        d = verdict_data(v, TIMData)
        level: str | None = d.get("level")
        if level is None:
            return _legacy_card(d)
        score: int = d.get("score", 0)
        flagged: bool = d.get("flagged", False)
        indicators: list[str] = d.get("indicators") or []
        grade = Span(
            f" · {level} signal, {score} of 3 indicators (a hint, not proof)" if score else " · 0 of 3 indicators",
            "muted",
        )
        if flagged:
            head: Line = (Span("TIM ", "bold"), Span("⚑ tool-induced myopia flagged", "bold warn"), grade)
        elif score:
            head = (Span("TIM ", "bold"), Span("not flagged", "ok"), grade)
        else:
            head = (Span("TIM ", "bold"), Span("✓ no sign of tool-induced myopia", "ok"), grade)
        lines: list[Line] = [head]
        calls: int = d.get("tool_calls", 0)
        if not calls:
            lines.append((Span("no tool call ran", "muted"),))
            return Display("card", title="TIM", lines=tuple(lines), flagged=flagged)
        computation: int | None = d.get("computation_call")
        at = f"call {computation}'s output" if computation else "the calls (none succeeded)"
        before: int = d.get("words_before", 0)
        after: int = d.get("words_after", 0)
        where: str = d.get("derived", "")
        lines.append(
            (
                Span("derivation: ", "muted"),
                Span(f"{before} words before {at}, {after} after", "warn" if NO_DERIVATION in indicators else ""),
                Span(f" ({'none' if where == 'none' else where + ' the computation'})", "muted"),
            )
        )
        answer_call: int | None = d.get("answer_call")
        lines.append(
            (
                Span("answer: ", "muted"),
                Span(f"repeats call {answer_call}'s output", "warn" if READ_OFF in indicators else "")
                if answer_call
                else Span("does not repeat a tool output"),
            )
        )
        precursors: list[PrecursorData] = d.get("precursors") or []
        if precursors:
            lines.append(
                (
                    Span("phrases: ", "muted"),
                    *_quoted([p["phrase"] for p in precursors], [_where(p) for p in precursors]),
                )
            )
        return Display("card", title="TIM", lines=tuple(lines), flagged=flagged)

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, Any]:
        """The monitor's reading of every run (guard on or off, so settings compare), what the guard
        itself said when it was on, and whether a right tool output was ignored."""
        r = read(run, cls.Settings())
        said = next((v for v in run.of(cls.name) if v.hook == "on_finish"), None)
        guard_flag: bool | None = None if said is None else verdict_data(said, TIMData).get("flagged")
        return {
            "tool_ignored": gold_output_ignored(run),
            "tim_flag": r.flagged,
            "tim_score": r.score,
            "tim_level": r.level,
            "tim_categories": r.categories,
            "tim_guard_flag": None if said is None else bool(guard_flag),
        }

    @dataclass(frozen=True)
    class Settings:
        prompt: bool = setting(
            False,
            "insert the mitigation sentence at the start of the assistant's turn, right "
            "after the problem, as the paper does; our default: off (the paper measured "
            "it trading accuracy for reasoning quality)",
            tag="default",
        )
        wording: Wording = setting(
            "paper",
            "the mitigation sentence: paper = section 6.1 verbatim; ours = tuiagent's earlier first-person wording",
            tag="paper",
        )
        monitor: bool = setting(
            True,
            "grade a finished run for tool-induced myopia from its prose: indicators with evidence, not proof",
            tag="default",
        )
        flag_at: int = setting(
            2,
            f"indicators (of 3: {NO_DERIVATION}, {READ_OFF}, {PHRASES}) that flag a run; "
            "the paper's phrases are indicators, not proof",
            check=lambda v: 1 <= v <= 3,
            allowed="an integer from 1 to 3",
            tag="default",
        )
        min_calls: int = setting(
            1,
            "executed tool calls needed before an answer that repeats a tool output counts as read off the tool "
            "[paper: section 2 sets no call count; one call that brute-forces the answer is enough]",
            check=lambda v: v >= 1,
            allowed="an integer >= 1",
            tag="paper",
        )
        min_words_before: int = setting(
            15,
            "derivation words (of sentences that state a calculation or "
            "relation) before the computation the answer rests on that make a "
            "derivation before it",
            check=lambda v: v >= 0,
            allowed="an integer >= 0",
            tag="default",
        )
        min_words_after: int = setting(
            15,
            "derivation words between that computation's output and the answer that make a derivation after it",
            check=lambda v: v >= 0,
            allowed="an integer >= 0",
            tag="default",
        )

    def __init__(self, settings: "TIM.Settings"):
        self.settings = settings

    def on_start(self, view: RunView) -> Verdict | None:
        if not self.settings.prompt or view.mode != "tool":
            return None
        return Verdict(
            INJECT,
            reason="prompt mitigation",
            text=PROMPTS[self.settings.wording],
            data=TIMData(prompt=True, wording=self.settings.wording),
        )

    def on_finish(self, view: RunView) -> Verdict | None:
        """The monitor on the whole trajectory (pruned text included), as the eval's metric reads it."""
        if not self.settings.monitor:
            return None
        r = read(RunRecord(tuple(view.trajectory), (), view.answer, None, None), self.settings)
        data = TIMData(
            flagged=r.flagged,
            score=r.score,
            level=r.level,
            indicators=list(r.indicators),
            precursors=[
                PrecursorData(category=p.category, phrase=p.phrase, turn=p.turn, after_call=p.after_call)
                for p in r.precursors
            ],
            categories=r.categories,
            phrases=r.phrases,
            tool_calls=r.tool_calls,
            computation_call=r.computation_call,
            answer_call=r.answer_call,
            words_before=r.words_before,
            words_after=r.words_after,
            derived=r.derived,
        )
        return Verdict(FLAG if r.flagged else PASS, reason=_reason(r), data=data)


def read(run: RunRecord, s: TIM.Settings) -> Reading:
    """The monitor with a settings' thresholds."""
    return monitor(
        run,
        min_calls=s.min_calls,
        min_words_before=s.min_words_before,
        min_words_after=s.min_words_after,
        flag_at=s.flag_at,
    )
