"""One run's numbers, folded from its events (the same events its trajectory holds).

Guard-reported numbers (ATTC decisions, G-STEP gate decisions, PruneTIR's stuck/resample/suspend,
necessity verdicts, the TIM monitor's flag) come from the GuardVerdict events of the guards that
were on. Two numbers are also measured for every run, guards on or off, so settings compare:
``unnecessary_calls`` (the necessity guard's deterministic rule judge over the executed blocks) and
``tim_flag`` (the TIM monitor's test: precursor phrases, or an answer copied from the last tool
output with little derivation after >= 2 calls).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from tuiagent.core import events as ev
from tuiagent.core.steps import run_metrics

TIM_MIN_CALLS = 2
TIM_MIN_WORDS_AFTER = 15
_WORD = re.compile(r"[A-Za-z0-9]+")


def _words_before_box(text: str) -> int:
    box = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    return len(_WORD.findall(text[:box] if box >= 0 else text))


def tool_ignored(gold: str | None, correct: bool | None, results: list[ev.ToolResult]) -> bool:
    """The last executed, successful tool output equals the gold answer, yet the run's answer is wrong."""
    from guards.tim import answer_matches_output

    ok = [r for r in results if r.executed and not (r.error or r.timed_out)]
    if gold is None or correct is not False or not ok:
        return False
    return answer_matches_output(gold, ok[-1].shown)


def tim_monitor(events: list[ev.Event], answer: str | None) -> tuple[bool, list[str]]:
    """The TIM monitor's test on any run: (flagged, precursor-phrase categories matched)."""
    from guards.tim import answer_matches_output, precursor_phrases

    generated = "\n".join(e.text for e in events if isinstance(e, ev.TurnEnded))
    categories = sorted({cat for cat, _ in precursor_phrases(generated)})
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.executed]
    ok = [r for r in results if not (r.error or r.timed_out)]
    copied = False
    if answer is not None and ok and len(results) >= TIM_MIN_CALLS and answer_matches_output(answer, ok[-1].shown):
        at = max(i for i, e in enumerate(events) if e is ok[-1])
        after = "".join(e.text for e in events[at:] if isinstance(e, ev.TurnEnded))
        copied = _words_before_box(after) < TIM_MIN_WORDS_AFTER
    return copied or bool(categories), categories


def unnecessary_calls(events: Iterable[ev.Event]) -> int:
    """Executed code blocks the necessity guard's rule judge calls unnecessary (trivial arithmetic/printing)."""
    from guards.necessity import rule_judge

    events = list(events)
    executed = {e.call for e in events if isinstance(e, ev.ToolResult) and e.executed}
    return sum(not rule_judge(e.code)[0] for e in events if isinstance(e, ev.CodeBlock) and e.call in executed)


def run_record(events: list[ev.Event], count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """The per-run numbers of the eval (everything but the keys), from a finished run's events."""
    finished = next(e for e in reversed(events) if isinstance(e, ev.RunFinished))
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    gold = started.gold if started else None
    base = run_metrics(events, count_tokens)
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict)]

    attc = Counter(str(v.data.get("decision")) for v in verdicts if v.guard == "attc" and v.hook == "on_tool_result")
    gate = Counter(str(v.data.get("decision")) for v in verdicts if v.guard == "gstep" and v.data.get("decision"))
    prunetir = [v for v in verdicts if v.guard == "prunetir"]
    necessity = [v for v in verdicts if v.guard == "necessity"]
    tim_guard = next((v for v in verdicts if v.guard == "tim" and v.hook == "on_finish"), None)
    tim_flag, tim_categories = tim_monitor(events, finished.answer)
    return {
        "answer": finished.answer,
        "correct": finished.correct,
        "reason": finished.reason,
        "tcn": base["tcn"],
        "tool_calls": finished.tool_calls,
        "blocks": sum(isinstance(e, ev.CodeBlock) for e in events),
        "skipped_calls": sum(not r.executed for r in results),
        "erroneous": base["erroneous"],
        "wtn": finished.context_tokens if base["wtn"] is None else base["wtn"],
        "generated_tokens": finished.generated_tokens,
        "turns": sum(isinstance(e, ev.TurnEnded) for e in events),
        "wall_s": finished.wall_s,
        "stuck": sum("stuck_in_a_row" in v.data for v in prunetir),
        "resampled": base["stpr"],
        "suspended": base["rtts"],
        "stp": base["stp"],
        "attc_trust": attc.get("trust", 0),
        "attc_rethink": attc.get("rethink", 0),
        "attc_timeout": attc.get("timeout", 0),
        "attc_na": attc.get("n/a", 0),
        "gate": dict(gate),
        "gate_continues": sum(n for d, n in gate.items() if d in ("continue", "replan")),
        "tool_ignored": tool_ignored(gold, finished.correct, results),
        "unnecessary_calls": unnecessary_calls(events),
        "necessity_flags": sum(v.data.get("necessary") is False for v in necessity),
        "necessity_skipped": sum(bool(v.data.get("skipped")) for v in necessity),
        "tim_flag": tim_flag,
        "tim_categories": tim_categories,
        "tim_guard_flag": None if tim_guard is None else bool(tim_guard.data.get("flagged")),
        "notices": [e.message for e in events if isinstance(e, ev.Notice) and e.level == "error"][:3],
        "trajectory": finished.trajectory,
    }
