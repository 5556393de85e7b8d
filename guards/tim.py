"""TIM: Tool-Induced Myopia ("From Proof to Program", arXiv 2511.10899).

Two parts:
- prompt mitigation [paper]: at the start of the assistant's turn, right after the problem,
  a sentence in the model's own voice saying that code and its results are only hints and the
  solution must be derived by mathematical reasoning (setting ``prompt``, off by default);
- myopia monitor [default, ours]: at the end of a run, flag the trajectory when (a) it made at
  least ``min_calls`` executed tool calls and its final answer repeats the last successful tool
  output with fewer than ``min_words_after`` words of the model's own text between that output
  and the answer, or (b) its generated text uses precursor phrases of the paper's Table 4
  categories. It is a hint, not proof: the matched phrases are shown.

The monitor reads the whole trajectory (``RunView.trajectory``: every generated turn and executed
output, text that PruneTIR pruned from the working context included), with the same function
(:func:`monitor`) as the eval's ``tim_flag``, so the guard and the eval agree on every run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, TypedDict

from guards.base import GuardBase, setting, verdict_data
from tuiagent.protocol import FLAG, INJECT, PASS, Display, Line, RunRecord, RunView, Span, Verdict, VerdictRecord

PROMPT = ("Before I start: code and its results are only helpful hints for me; I must derive the "
          "solution itself by mathematical reasoning.")

# Precursor phrases, one compact regex list per Table 4 category (our wording; case-insensitive).
_W = r"(?:\s+\w+){0,3}?"  # up to three filler words ("let's quickly verify this numerically")
CATEGORIES: dict[str, list[str]] = {
    "numerical/empirical checking": [
        rf"\b(?:one|we|i)\s+(?:can\s+)?checks?{_W}\s+numerically\b",
        rf"\b(?:let['’]?s|let\s+us|i'?ll|we'?ll|i\s+will|we\s+will)\s+(?:verify|check|test|confirm){_W}\s+numerically\b",
        r"\bnumerical(?:ly)?\s+(?:check|verif(?:y|ication)|evidence|experiments?|tests?)\b",
        r"\b(?:check|test|try)(?:ing)?\s+(?:it\s+|this\s+)?(?:for|with|on)\s+(?:a\s+few|some|several|small)\s+(?:small\s+)?(?:values|cases|numbers|examples)\b",
        r"\bempirically\b",
    ],
    "verification via code": [
        r"\b(?:double[- ]?check|verify|check|confirm|validate)\w*\s+(?:\w+\s+){0,3}?(?:with|using|in|via|by)\s+(?:some\s+|a\s+)?(?:python|code|a\s+(?:quick\s+)?(?:script|program|computation))\b",
        r"\buse\s+(?:python|code|sympy|a\s+(?:script|program))\s+to\s+(?:analy[sz]e|verify|check|confirm|compute\s+and\s+check|test)\b",
        r"\blet\s+(?:the\s+)?(?:code|python|computer)\s+(?:verify|check|confirm)\b",
    ],
    "approximation/convergence": [
        r"\b(?:results?|values?|numbers?|it|sequence|sum|series)\s+(?:seems?|appears?)\s+to\s+(?:be\s+)?(?:converg|approach|stabili[sz]|tend)\w*",
        r"\bverify\s+(?:this|the|that)\s+pattern\b",
        r"\b(?:the\s+)?pattern\s+(?:seems|appears)\s+to\s+(?:hold|continue)\b",
        r"\b(?:gets?|getting)\s+closer\s+(?:and\s+closer\s+)?to\b",
    ],
    "systematic search/enumeration": [
        r"\bcheck\s+(?:\w+\s+){0,2}?(?:values|cases|numbers|possibilities)\s+systematically\b",
        r"\bsystematically\s+(?:check|search|enumerate|test|try|list)\w*",
        r"\bexhaustive(?:ly)?\s+(?:check|search|enumerat)\w*(?:\s+up\s+to)?",
        r"\b(?:brute[- ]?force|enumerat(?:e|ing|ion)\s+(?:all|every)|(?:check|try|test)(?:ing)?\s+all\s+(?:possible\s+)?(?:values|cases|combinations|numbers))\b",
        r"\bsearch\s+(?:over|through)\s+all\b",
    ],
}
_COMPILED = {cat: [re.compile(p, re.IGNORECASE) for p in pats] for cat, pats in CATEGORIES.items()}

_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_WORD = re.compile(r"[A-Za-z0-9]+")


def precursor_phrases(text: str) -> list[tuple[str, str]]:
    """(category, matched text) for every precursor phrase in ``text``, in order of appearance."""
    found = []
    for cat, patterns in _COMPILED.items():
        for pattern in patterns:
            for m in pattern.finditer(text):
                found.append((m.start(), cat, m.group(0)))
    found.sort()
    return [(cat, phrase) for _, cat, phrase in found]


def _number(text: str) -> Fraction | None:
    s = text.strip().replace(",", "").replace("$", "").replace("\\!", "").rstrip(".")
    frac = re.fullmatch(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", s)
    if frac:
        s = f"{frac.group(1)}/{frac.group(2)}"
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text).strip("$.").lower()


def answer_matches_output(answer: str, output: str) -> bool:
    """Does the answer equal the output's last number or its last non-empty line (normalised)?"""
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    if not lines:
        return False
    numbers = _NUMBER.findall(output)
    a_num = _number(answer)
    if a_num is not None:
        if numbers and _number(numbers[-1]) == a_num:
            return True
        if _number(lines[-1]) == a_num:
            return True
    return _norm(answer) == _norm(lines[-1]) or (bool(numbers) and _norm(answer) == _norm(numbers[-1]))


def _words_before_box(text: str) -> int:
    box = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    return len(_WORD.findall(text[:box] if box >= 0 else text))


@dataclass(frozen=True)
class Reading:
    """What the monitor found in one run."""

    flagged: bool
    categories: list[str]  # precursor-phrase categories matched
    phrases: list[str]  # the matched phrases, in order
    tool_calls: int  # executed calls
    answer_from_tool: bool  # the answer repeats the last successful output with little derivation after it
    words_after_output: int | None  # None: the answer does not repeat that output


def monitor(run: RunRecord, min_calls: int, min_words_after: int) -> Reading:
    """The monitor's test [ours] on the whole trajectory (``run.pieces``: every generated turn, text
    that PruneTIR pruned from the working context included), for the guard at the end of a run and
    for the eval's metric on any run, guard on or off. Flagged: precursor phrases in what the model
    generated, or an answer that repeats the last successful tool output with fewer than
    ``min_words_after`` words before its \\boxed{}, once ``min_calls`` calls ran."""
    matches = precursor_phrases("\n".join(p.text for p in run.pieces if p.kind == "turn"))
    outputs = [i for i, p in enumerate(run.pieces) if p.kind == "output"]
    ok = [i for i in outputs if not run.pieces[i].error]
    from_tool, words = False, None
    if run.answer is not None and ok and answer_matches_output(run.answer, run.pieces[ok[-1]].text):
        words = _words_before_box("".join(p.text for p in run.pieces[ok[-1]:] if p.kind == "turn"))
        from_tool = words < min_words_after
    copied = from_tool and len(outputs) >= min_calls
    return Reading(copied or bool(matches), sorted({cat for cat, _ in matches}), [p for _, p in matches],
                   len(outputs), from_tool, words)


def tool_ignored(run: RunRecord) -> bool:
    """The last successful tool output equals the gold answer, yet the run's answer is wrong."""
    ok = [p for p in run.pieces if p.kind == "output" and not p.error]
    if run.gold is None or run.correct is not False or not ok:
        return False
    return answer_matches_output(run.gold, ok[-1].text)


class TIMData(TypedDict, total=False):
    """The data of TIM's verdicts: the prompt mitigation (``on_start``: only ``prompt``) or the
    monitor at the end of the run (``on_finish``: the rest)."""

    prompt: bool
    flagged: bool
    categories: list[str]  # precursor-phrase categories matched
    phrases: list[str]  # the matched phrases, in order
    tool_calls: int  # executed calls
    answer_from_tool: bool  # the answer repeats the last successful output with little derivation after it
    words_after_output: int | None  # None: the answer does not repeat that output


class TIM(GuardBase):
    """TIM: prompt against tool-induced myopia and a monitor for its signs (arXiv 2511.10899)."""

    name: ClassVar[str] = "tim"
    order: ClassVar[int] = 50
    main_settings = ("monitor", "prompt")
    summary = (("tool_ignored", "tool ignored"), ("tim_flag", "TIM flags"))

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        d = verdict_data(v, TIMData)
        phrases: list[str] = d.get("phrases") or []
        flagged: bool | None = d.get("flagged")
        return ("flagged" if flagged else "clean") + (f": {', '.join(phrases[:2])}" if phrases else "")

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """At the end of the run: a card, flagged or not, with what raised the flag."""
        if v.hook != "on_finish":
            return super().display(v)
        d = verdict_data(v, TIMData)
        flagged: bool | None = d.get("flagged")
        if not flagged:
            return Display("card", title="TIM", lines=((Span("TIM ", "bold"), Span("✓ no sign of tool-induced myopia", "ok")),))
        lines: list[Line] = [
            (Span("TIM ", "bold"), Span("⚑ tool-induced myopia flagged", "bold warn"), Span(" (a hint, not proof)", "muted"))
        ]
        answer_from_tool: bool | None = d.get("answer_from_tool")
        if answer_from_tool:
            words: int | None = d.get("words_after_output")
            lines.append((Span(f"answer repeats the last tool output with {words} words of "
                               "derivation after it", "warn"),))
        phrases: list[str] = d.get("phrases") or []
        if phrases:
            quoted: list[Span] = []
            for n, p in enumerate(phrases):
                quoted += [Span("; ")] if n else []
                quoted.append(Span(f"“{p}”", "italic"))
            lines.append((Span("phrases: ", "muted"), *quoted))
        return Display("card", title="TIM", lines=tuple(lines), flagged=True)

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, Any]:
        """The monitor's flag on every run (guard on or off, so settings compare), what the guard
        itself said when it was on, and whether a right tool output was ignored."""
        defaults = cls.Settings()
        reading = monitor(run, defaults.min_calls, defaults.min_words_after)
        said = next((v for v in run.of(cls.name) if v.hook == "on_finish"), None)
        guard_flag: bool | None = None if said is None else verdict_data(said, TIMData).get("flagged")
        return {"tool_ignored": tool_ignored(run), "tim_flag": reading.flagged, "tim_categories": reading.categories,
                "tim_guard_flag": None if said is None else bool(guard_flag)}

    @dataclass(frozen=True)
    class Settings:
        prompt: bool = setting(False, "insert the paper's mitigation sentence (code is only a hint; derive "
                                      "by reasoning) at the start of the assistant's turn; our default: off",
                               tag="default")
        monitor: bool = setting(True, "flag a finished run that shows tool-induced myopia (hint, not proof)",
                                tag="default")
        min_calls: int = setting(2, "executed tool calls needed before an answer copied from a tool output "
                                    "is flagged", check=lambda v: v >= 1, allowed="an integer >= 1", tag="default")
        min_words_after: int = setting(15, "fewer words than this between the last tool output and the answer "
                                           "count as 'little derivation'", check=lambda v: v >= 0,
                                       allowed="an integer >= 0", tag="default")

    def __init__(self, settings: "TIM.Settings"):
        self.settings = settings

    def on_start(self, view: RunView) -> Verdict | None:
        if not self.settings.prompt or view.mode != "tool":
            return None
        return Verdict(INJECT, reason="prompt mitigation", text=PROMPT, data=TIMData(prompt=True))

    def on_finish(self, view: RunView) -> Verdict | None:
        """The monitor on the whole trajectory (pruned text included), as the eval's metric reads it."""
        if not self.settings.monitor:
            return None
        r = monitor(RunRecord(tuple(view.trajectory), (), view.answer, None, None),
                    self.settings.min_calls, self.settings.min_words_after)
        reasons = []
        if r.answer_from_tool and r.tool_calls >= self.settings.min_calls:
            reasons.append(f"answer repeats the last tool output after {r.words_after_output} words, "
                           f"with {r.tool_calls} tool calls")
        if r.phrases:
            reasons.append("precursor phrases: " + "; ".join(r.categories))
        data = TIMData(flagged=r.flagged, categories=r.categories, phrases=r.phrases, tool_calls=r.tool_calls,
                       answer_from_tool=r.answer_from_tool, words_after_output=r.words_after_output)
        return Verdict(FLAG if r.flagged else PASS, reason=" and ".join(reasons) or "clean", data=data)
