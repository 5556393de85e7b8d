"""ATTC: Adaptive Tool Trust Calibration (arXiv 2604.08281).

After each executed tool call, the confidence of the code block that produced it (the geometric
mean of its tokens' probabilities, fences included) decides one sentence appended to the
assistant's own continuation: trust the result, or rethink; a call the kernel timed out gets the
timeout sentence. The confidence, our token rules and every constant with its source:
docs/papers/attc.md#attc.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, TypedDict

from guards.base import GuardBase, setting, verdict_data
from tuiagent.parsing import closed_blocks, last_closed_block
from tuiagent.protocol import (
    INJECT,
    PASS,
    Call,
    Display,
    Gauge,
    RunRecord,
    RunView,
    Span,
    TokenLP,
    Verdict,
    VerdictRecord,
)

# The sentences appended after the output block, in the model's own voice.
# [ref] the authors' reference code, 00Dreamer00/ATTC math_eval_confident.py (commit 77adefb), main():
# the strings it appends to the query after the ```output block (the paper's copy in
# shared/papers ends before the method's details and quotes none). The reference ends trust and
# rethink with "\n", as the loop ends every note; its timeout string ends "\n " (a stray space, left out).
REF_SENTENCES = {
    "trust": "I should believe the code execution result above and now I will give the answer based on it.",
    "rethink": "I should consider optimizing the code or reflect on whether to change my reasoning path.",
    "timeout": "Code execution timed out. Perhaps I should consider optimizing the code or reflect on "
    "whether to change my reasoning path.",
}
# [ours] tuiagent's earlier wording, the same meanings (setting wording = "ours").
OUR_SENTENCES = {
    "trust": "The execution result above is reliable, so I will trust it and give the answer based on it.",
    "rethink": "I am not sure this code is right; I should optimise it or reconsider my reasoning path.",
    "timeout": "The code execution timed out; I should optimise the code or reconsider my reasoning path.",
}
SENTENCES = {"ref": REF_SENTENCES, "ours": OUR_SENTENCES}
Wording = Literal["ref", "ours"]

Decision = Literal["trust", "rethink", "timeout", "n/a"]


class ATTCData(TypedDict):
    """The data of ATTC's verdicts (every verdict has every key)."""

    confidence: float | None  # exp(mean logprob) of the block's tokens; None: n/a
    threshold: float  # tau
    mean_logprob: float | None
    tokens: int  # tokens counted
    call: int
    timed_out: bool
    decision: Decision  # "n/a": a pass, nothing injected


def sampled_tokens(tokens: Sequence[TokenLP]) -> list[tuple[int, int, float | None]]:
    """The turn's sampled tokens as (start, end, logprob) character ranges of the turn text.

    A piece with logprob None that follows a piece with a logprob is the rest of a cut token:
    it extends that token's range instead of standing alone.
    """
    out: list[tuple[int, int, float | None]] = []
    pos = 0
    for tok in tokens:
        end = pos + len(tok.text)
        if tok.logprob is None and out and out[-1][2] is not None and out[-1][1] == pos:
            out[-1] = (out[-1][0], end, out[-1][2])
        else:
            out.append((pos, end, tok.logprob))
        pos = end
    return out


BlockChoice = Literal["last", "first"]
TokenRule = Literal["overlap", "start"]


def block_confidence(
    text: str, tokens: Sequence[TokenLP], block_choice: BlockChoice = "last", token_rule: TokenRule = "overlap"
) -> tuple[float | None, float | None, int]:
    """(conf, mean logprob, tokens counted) of a closed code block of a turn (its last or its first);
    conf None when n/a. A token counts when its characters overlap the block, or (``start``) when
    its first character lies in it."""
    block = last_closed_block(text) if block_choice == "last" else next(closed_blocks(text), None)
    if block is None:
        return None, None, 0
    if token_rule == "start":
        spans = [(start, lp) for start, end, lp in sampled_tokens(tokens) if end > start]
        lps = [lp for start, lp in spans if lp is not None and block.start <= start < block.end]
    else:
        lps = [
            lp
            for start, end, lp in sampled_tokens(tokens)
            if lp is not None and end > block.start and start < block.end and end > start
        ]
    if not lps:
        return None, None, 0
    mean = sum(lps) / len(lps)
    return math.exp(mean), mean, len(lps)


class ATTC(GuardBase):
    """ATTC: trust or rethink each tool result by the code block's token confidence (arXiv 2604.08281)."""

    name: ClassVar[str] = "attc"
    paper_reading = {"threshold": 0.97, "wording": "ref", "block": "first", "tokens": "start"}
    order: ClassVar[int] = 30
    main_settings = ("threshold", "wording")
    summary = (("attc_trust", "trust"), ("attc_rethink", "rethink"))
    SCALE = (0.80, 1.00)  # [ours] the confidence bar's range: every block of the default model lands in it
    _STYLE = {"trust": "bold ok", "rethink": "bold warn", "timeout": "bold error"}

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        d = verdict_data(v, ATTCData)
        conf: float | None = d.get("confidence")
        decision: str = d.get("decision", "")
        if conf is None:
            return "conf n/a" + (" timeout" if decision == "timeout" else "")
        tau: float = d.get("threshold", 0)
        return f"conf {conf:.3f} / τ {tau:.2f} {decision}"

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """The block's confidence on a bar, against the threshold, and the decision."""
        d = verdict_data(v, ATTCData)
        conf: float | None = d.get("confidence")
        tau: float | None = d.get("threshold")
        decision: str = d.get("decision", "")
        call: int | None = d.get("call")
        line = (
            Span("ATTC ", "bold"),
            Gauge(conf, tau, lo=cls.SCALE[0], hi=cls.SCALE[1]),
            Span(f" {'n/a' if conf is None else f'{conf:.3f}'}", "bold"),
            Span(f"  τ {tau:.3f}" if tau is not None else "", "muted"),
            Span("  → ", "muted"),
            Span(decision or "n/a", cls._STYLE.get(decision, "muted")),
        )
        return Display(
            "code",
            lines=(line,),
            call=call,
            tooltip="ATTC confidence = exp(mean log-prob of the block's tokens), scale 0.80–1.00",
        )

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, int]:
        said: list[Decision | None] = [
            verdict_data(v, ATTCData).get("decision") for v in run.of(cls.name) if v.hook == "on_tool_result"
        ]
        decisions = [str(d) for d in said]
        return {
            f"attc_{key}": decisions.count(d)
            for key, d in (("trust", "trust"), ("rethink", "rethink"), ("timeout", "timeout"), ("na", "n/a"))
        }

    @dataclass(frozen=True)
    class Settings:
        threshold: float = setting(
            0.97,
            "confidence threshold tau: conf = exp(mean logprob of the code block) >= tau -> trust, "
            "else rethink; set per model in models.toml ([models.<id>.guards.attc]) since logprob "
            "scales differ between models, quantisations and temperatures",
            check=lambda v: 0.0 < v <= 1.0,
            allowed="a probability in (0, 1]",
            tag="ref",
        )
        wording: Wording = setting(
            "ref",
            "the trust / rethink / timeout sentences: ref = the authors' reference code, verbatim "
            "(math_eval_confident.py); ours = tuiagent's earlier wording of the same meanings",
            tag="ref",
        )

        block: BlockChoice = setting(
            "last",
            "which closed ```python block of the turn is scored: last = the one that ran [ours]; first = the "
            "reference code's (calculate_code_prob_avg takes full_text.find('```python'))",
            tag="default",
        )
        tokens: TokenRule = setting(
            "overlap",
            "which sampled tokens count: overlap = every token whose characters overlap the block, fences "
            "included [ours]; start = those whose first character lies in it through the closing fence, "
            "the reference code's rule",
            tag="default",
        )

    def __init__(self, settings: "ATTC.Settings"):
        self.settings = settings

    def on_tool_result(self, call: Call, view: RunView) -> Verdict | None:
        if not call.executed:
            return None
        tau = self.settings.threshold
        timed_out = call.timed_out  # the kernel's status [ref]: the reference reads its executor's report
        conf, mean, n = block_confidence(view.turn_text, view.turn_tokens, self.settings.block, self.settings.tokens)
        data = ATTCData(
            confidence=conf,
            threshold=tau,
            mean_logprob=mean,
            tokens=n,
            call=call.call,
            timed_out=timed_out,
            decision="n/a",
        )
        measured = "confidence n/a" if conf is None else f"confidence {conf:.4f} {'>=' if conf >= tau else '<'} {tau:g}"
        decision: Decision
        if timed_out:  # [ref] before the confidence, whatever it is
            decision, reason = "timeout", f"the call timed out ({measured})"
        elif conf is None:
            return Verdict(PASS, reason="confidence n/a (no closed code block or no logprobs)", data=data)
        else:
            decision, reason = ("trust" if conf >= tau else "rethink"), measured
        data["decision"] = decision
        return Verdict(INJECT, reason=reason, text=SENTENCES[self.settings.wording][decision], data=data)
