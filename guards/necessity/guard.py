"""Necessity flags ("Spurious Tool Use", arXiv 2609.16268): is this code block necessary for the question?

Every code block gets a verdict before it runs, from one of two judges: ``model`` (a model asked
the paper's judge prompt; the model under test unless ``judge_model`` names another) or
``arithmetic`` (our default heuristic of arithmetic difficulty, no model call). Mode ``flag``
annotates; ``enforce`` skips a block judged unnecessary. Unlike the paper (a training reward),
this judges at inference time: docs/papers/necessity.md#necessity-flags has the paper, the prompt, the
rules and every constant with its source.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import ClassVar, Literal, TypedDict

from guards.base import GuardBase, setting, verdict_data
from guards.necessity import arithmetic as necessity_arithmetic
from tuiagent.protocol import (
    FLAG,
    SKIP,
    Display,
    JudgeReply,
    RunRecord,
    RunView,
    Span,
    TokenLP,
    Verdict,
    VerdictRecord,
)

SKIP_TEXT = (
    "This code was not run: the step is simple enough to do without the tool. Continue by "
    "reasoning directly, step by step, and give the final answer in \\boxed{}."
)

# [paper] Appendix A.3, "Tool necessity judge", verbatim (the paper prints it as one paragraph).
PAPER_PROMPT = (
    "You are judging whether THIS tool call is NECESSARY to solve the original question correctly. "
    "A tool call is NECESSARY only if a competent model cannot answer the question correctly without "
    "using this tool (at some point). Convenience uses (trivial arithmetic, formatting, double-checking) "
    "are NOT necessary. Do NOT judge whether the tool input looks reasonable by itself. Judge necessity "
    "for the question. Question: {question} Tool called: {tool_type} Tool input: {tool_content} "
    'Return ONLY JSON: {{"tool_necessary": true, "reason": "1-2 sentences"}}'
)
# [ours] the value of {tool_type}: the paper's agent calls the interpreter with <python> tags; the
# string its judge was given is not printed.
TOOL_TYPE = "python"

# [ours] our earlier question (judge_prompt = "ours"): one word, read from its first token.
OUR_PROMPT = """You are checking whether a math assistant needs a tool for one step.

Problem:
{problem}

Tool: a Python interpreter.
Tool input:
```python
{code}
```

A tool call is NECESSARY when a competent solver could not reliably get this result without running it. It is UNNECESSARY when the step is easy to do by hand (simple arithmetic, formatting, printing known values).
Answer with one word, NECESSARY or UNNECESSARY."""
OUR_MAX_TOKENS = 3  # [ours] one word

_VERDICT = re.compile(r'tool_necessary"?\s*:\s*"?(true|false)', re.IGNORECASE)
_REASON = re.compile(r'"reason"\s*:\s*"((?:[^"\\]|\\.)*)"')


class NecessityData(TypedDict, total=False):
    """The data of Necessity's verdicts (one per code block)."""

    necessary: bool
    p_unnecessary: float
    # who decided: "arithmetic" (also when the model judge fell back to it; "rule" in earlier records) or "model"
    judge: Literal["arithmetic", "model", "rule"]
    judge_model: str  # the model judge: the id of the model that answered
    prompt: Literal["paper", "ours"]  # the model judge: which question it was asked
    reason: str
    reply: str  # the model judge: its reply and the log-probability of its verdict token
    logprob: float | None
    fallback: str  # why the arithmetic heuristic answered for the model judge
    mode: Literal["flag", "enforce"]
    threshold: float
    skipped: bool


def arithmetic_judge(
    code: str, limits: Necessity.Settings | None = None, question: str = ""
) -> tuple[bool, float, str]:
    """(necessary, P(unnecessary), reason) from the arithmetic-difficulty heuristic (see
    guards.necessity.arithmetic). ``limits``: the guard's settings (its defaults when None);
    ``question``: the problem, whose stated numbers a block may recompute without needing the tool."""
    return necessity_arithmetic.judge(code, limits or Necessity.Settings(), question)


def read_reply(text: str, logprob: float | None) -> float | None:
    """Our prompt's reply: P(unnecessary) from its word and first-token log-probability; None when unreadable."""
    word = text.strip().lstrip("*\"'`").upper()
    if word.startswith("UN"):
        return 1.0 if logprob is None else min(1.0, math.exp(logprob))
    if word.startswith("NE"):
        return 0.0 if logprob is None else max(0.0, 1.0 - math.exp(logprob))
    return None


def _logprob_at(tokens: tuple[TokenLP, ...], offset: int) -> float | None:
    """The log-probability of the token that holds character ``offset`` of the reply."""
    end = 0
    for t in tokens:
        end += len(t.text)
        if offset < end:
            return t.logprob
    return None


def read_paper_reply(reply: JudgeReply) -> tuple[bool, float, float | None, str] | None:
    """The paper prompt's JSON reply: (necessary, P(unnecessary), the verdict token's
    log-probability, the judge's reason); None when it gives no verdict."""
    m = _VERDICT.search(reply.text)
    if m is None:
        return None
    necessary = m.group(1).lower() == "true"
    lp = _logprob_at(reply.tokens, m.start(1))
    p_said = 1.0 if lp is None else min(1.0, math.exp(lp))
    said = _REASON.search(reply.text)
    try:
        reason = json.loads(f'"{said.group(1)}"') if said else ""
    except json.JSONDecodeError:
        reason = said.group(1) if said else ""
    return necessary, (1.0 - p_said) if necessary else p_said, lp, reason


class Necessity(GuardBase):
    """Necessity: flag (or skip) code blocks a competent model would not need for the question (arXiv 2609.16268)."""

    name: ClassVar[str] = "necessity"
    paper_reading = {"judge": "model", "judge_prompt": "paper"}
    order: ClassVar[int] = 20
    main_settings = ("mode", "judge", "judge_model", "threshold")
    summary = (("unnecessary_calls", "unnec calls"), ("necessity_flags", "nec flags"))

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        d = verdict_data(v, NecessityData)
        necessary: bool = d.get("necessary", True)
        p: float = d.get("p_unnecessary", 0)
        skipped: bool | None = d.get("skipped")
        label = "necessary" if necessary else "unnecessary"
        return f"{label} p={p:.2f}" + (" skipped" if skipped else "")

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """A flag on the code block's status line."""
        if v.hook != "on_code":
            return super().display(v)
        d = verdict_data(v, NecessityData)
        necessary = bool(d.get("necessary", True))
        p: float | None = d.get("p_unnecessary")
        judge: str = d.get("judge", "?")
        model: str = d.get("judge_model", "")
        who = f"{judge}: {model}" if judge == "model" and model else judge
        return Display(
            "code-status",
            lines=(
                (
                    Span("  · ", "muted"),
                    Span("necessary", "muted") if necessary else Span("⚑ unnecessary", "bold warn"),
                    Span(f"{'' if p is None else f' P(unnecessary) {p:.2f}'} ({who})", "muted"),
                ),
            ),
        )

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, int]:
        """Flags and skips of this guard, and (for every run, on or off) the executed blocks its
        arithmetic heuristic calls unnecessary for the run's question, so settings compare."""
        said = [verdict_data(v, NecessityData) for v in run.of(cls.name)]
        necessary: list[bool | None] = [d.get("necessary") for d in said]
        skipped: list[bool | None] = [d.get("skipped") for d in said]
        return {
            "unnecessary_calls": sum(
                not arithmetic_judge(p.text, question=run.problem)[0]
                for p in run.pieces
                if p.kind == "code" and p.executed
            ),
            "necessity_flags": sum(n is False for n in necessary),
            "necessity_skipped": sum(bool(s) for s in skipped),
        }

    @dataclass(frozen=True)
    class Settings:
        judge: Literal["arithmetic", "model", "rule"] = setting(
            "arithmetic",
            "who decides: 'model' asks a model the paper's judge question; 'arithmetic' is our "
            "fast heuristic of arithmetic difficulty (no model call, the prefix cache is kept), not "
            "the paper's judgement; 'rule' is the earlier name of 'arithmetic' (kept for earlier "
            "configurations and forks of earlier runs); our default: arithmetic (on the default "
            "model the model judge called every block necessary, docs/papers/necessity.md)",
            tag="default",
        )
        mode: Literal["flag", "enforce"] = setting(
            "flag",
            "'flag' annotates only; 'enforce' does not run an unnecessary call and tells the model "
            "to reason directly; our default: flag (the paper uses its judge as a training reward, "
            "not to stop calls)",
            tag="default",
        )
        threshold: float = setting(
            0.5,
            "enforce skips a call when P(unnecessary) >= threshold",
            check=lambda v: 0.0 <= v <= 1.0,
            allowed="a probability in [0, 1]",
            tag="default",
        )
        judge_model: str = setting(
            "",
            "model judge: the models.toml id of the model that judges (a local llama.cpp model or an "
            "OpenAI-compatible server entry); empty: the model under test, whose prefix cache a judge "
            "call costs (the paper's judge, GPT-5 Nano, is a model of its own); our default: empty",
            tag="default",
        )
        judge_prompt: Literal["paper", "ours"] = setting(
            "paper",
            "model judge: 'paper', the paper's tool-necessity judge prompt verbatim (Appendix A.3: "
            "the question, the tool, the tool input; a JSON reply); 'ours', our earlier one-word "
            "NECESSARY/UNNECESSARY question, read from its first token",
            tag="paper",
        )
        judge_max_tokens: int = setting(
            128,
            "model judge, paper prompt: the most tokens of its JSON reply (the verdict and a 1-2 "
            "sentence reason); a reply cut before its verdict falls back to the arithmetic heuristic",
            check=lambda v: v >= 8,
            allowed="an integer >= 8",
            tag="default",
        )
        max_operations: int = setting(
            10,
            "arithmetic heuristic: a block of more arithmetic operations is a long chain of steps: needed",
            check=lambda v: v >= 1,
            allowed="an integer >= 1",
            tag="default",
        )
        max_terms: int = setting(
            5,
            "arithmetic heuristic: a sum of more terms is needed",
            check=lambda v: v >= 2,
            allowed="an integer >= 2",
            tag="default",
        )
        max_digits: int = setting(
            6,
            "arithmetic heuristic: a sum or difference with a number of more significant digits is needed",
            check=lambda v: v >= 1,
            allowed="an integer >= 1",
            tag="default",
        )
        max_digit_products: int = setting(
            6,
            "arithmetic heuristic: a multiplication or division whose operands' significant digits "
            "multiply to more than this (3 x 3 = 9) is long, so needed",
            check=lambda v: v >= 1,
            allowed="an integer >= 1",
            tag="default",
        )
        max_result_digits: int = setting(
            4,
            "arithmetic heuristic: a power, root or factorial whose exact result has more significant digits is needed",
            check=lambda v: v >= 1,
            allowed="an integer >= 1",
            tag="default",
        )

    def __init__(self, settings: "Necessity.Settings"):
        self.settings = settings

    async def on_code(self, code: str, view: RunView) -> Verdict:
        s = self.settings
        data: NecessityData
        if s.judge == "model":
            data = await self._ask_model(code, view)
        else:
            necessary, p, reason = arithmetic_judge(code, s, view.problem)
            data = {"necessary": necessary, "p_unnecessary": p, "judge": "arithmetic", "reason": reason}
        data.update({"mode": s.mode, "threshold": s.threshold})
        p = data["p_unnecessary"]
        label = "unnecessary" if not data["necessary"] else "necessary"
        reason = f"{label} (P(unnecessary) = {p:.3f}, {data['judge']} judge)"
        if s.mode == "enforce" and not data["necessary"] and p >= s.threshold:
            data["skipped"] = True
            return Verdict(SKIP, reason=reason + ": not executed", text=SKIP_TEXT, data=data)
        data["skipped"] = False
        return Verdict(FLAG, reason=reason, data=data)

    def question(self, code: str, view: RunView) -> tuple[str, int]:
        """The model judge's question for ``code`` and the most tokens of its reply."""
        if self.settings.judge_prompt == "ours":
            return OUR_PROMPT.format(problem=view.problem.strip(), code=code.strip()), OUR_MAX_TOKENS
        return (
            PAPER_PROMPT.format(question=view.problem.strip(), tool_type=TOOL_TYPE, tool_content=code.strip()),
            self.settings.judge_max_tokens,
        )

    async def _ask_model(self, code: str, view: RunView) -> NecessityData:
        """The model judge's verdict data, or the arithmetic heuristic's with ``fallback`` saying why."""
        s = self.settings
        why = ""
        if view.judge is None:
            why = "no model judge available"
        else:
            question, max_tokens = self.question(code, view)
            try:
                reply = await view.judge(question, max_tokens=max_tokens, model=s.judge_model or None)
            except Exception as e:  # the arithmetic heuristic answers instead, visibly
                why = f"model judge failed ({type(e).__name__}: {e})"
            else:
                verdict = self._read(reply)
                if verdict is not None:
                    return verdict
                why = f"unreadable model reply {reply.text!r}"
        necessary, p, reason = arithmetic_judge(code, s, view.problem)
        return {"necessary": necessary, "p_unnecessary": p, "judge": "arithmetic", "reason": reason, "fallback": why}

    def _read(self, reply: JudgeReply) -> NecessityData | None:
        """The verdict data of a readable reply to the configured prompt."""
        data: NecessityData = {
            "judge": "model",
            "judge_model": reply.model,
            "prompt": self.settings.judge_prompt,
            "reply": reply.text,
        }
        if self.settings.judge_prompt == "ours":
            p = read_reply(reply.text, reply.logprob)
            if p is None:
                return None
            necessary = not reply.text.strip().lstrip("*\"'`").upper().startswith("UN")
            data.update(
                {
                    "necessary": necessary,
                    "p_unnecessary": p,
                    "logprob": reply.logprob,
                    "reason": f"model replied {reply.text.strip()!r}",
                }
            )
            return data
        read = read_paper_reply(reply)
        if read is None:
            return None
        necessary, p, lp, said = read
        data.update(
            {
                "necessary": necessary,
                "p_unnecessary": p,
                "logprob": lp,
                "reason": said or f"model replied {reply.text.strip()!r}",
            }
        )
        return data
