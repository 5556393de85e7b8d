r"""PruneTIR: pruning erroneous tool-call traces from the working context.

At ``on_tool_result`` of executed calls it follows error episodes (an erroneous call e0 and the
turns that try to fix it): a resolved episode is pruned from the context (STP, intent shift
included), a stuck one cut back to e0's turn and resampled (STPR), and repeated stuck episodes
suspend the tool for a span (RTTS). The guard only decides; the loop prunes, resamples and
suspends. The rules, the intent-shift test, the ablations and every constant with its source:
docs/papers/prunetir.md#prunetir.
"""

from __future__ import annotations

import io
import keyword
import random
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import ClassVar, TypedDict

from guards.base import GuardBase, setting, suspension_banner, verdict_data
from tuiagent.protocol import (
    FLAG,
    PRUNE,
    RESAMPLE,
    SUSPEND,
    Call,
    Display,
    RunRecord,
    RunView,
    Segment,
    Verdict,
    VerdictRecord,
)

# [ours] the paper's RTTS prompt is not given in the summary we have; the model's own voice, as the
# loop appends it to the assistant's turn. The first is for a span (suspend_turns), the second for
# a suspension for the rest of the run (suspend_turns = none).
RTTS_NOTE = (
    "The Python tool is not available for now, so my code will not be run. "
    "I will continue by reasoning step by step by hand, without code, and give the final answer in \\boxed{}.\n"
)
RTTS_NOTE_REST = (
    "The Python tool is not available any more, so none of my code will be run from here on. "
    "I will continue by reasoning step by step by hand, without code, and give the final answer in \\boxed{}.\n"
)

# -- the intent-shift test ---------------------------------------------------------------------

# A traceback frame header: IPython's "Cell In[3], line 2" (", in f(a)" may follow) or a plain
# Python frame in an unnamed source. Groups: 1 cell id, 2 line (IPython); 3 source name, 4 line (plain).
_FRAME = re.compile(
    r'^(?:Cell In\s*\[([^\]]*)\],\s*line\s+(\d+)|\s*File\s+"(<(?:stdin|string|ipython-input[^>]*)>)",\s*line\s+(\d+))',
    re.MULTILINE,
)
_ARROW = re.compile(r"^-+>\s*\d+\s?(.*)$", re.MULTILINE)
_FALLBACK_TOKENS = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|'[^'\n]*'|\"[^\"\n]*\"")


@lru_cache(maxsize=64)
def failing_statement(code: str, output: str) -> str:
    """The statement e0 failed at: the deepest traceback line inside e0's own cell (frames in
    earlier cells or libraries are skipped), else the last "---->" line, else e0's last line."""
    lines = code.splitlines()
    frames = list(_FRAME.finditer(output))
    own = frames[0].group(1) if frames and frames[0].group(1) is not None else None
    found = None
    for i, m in enumerate(frames):
        cell, n = (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))
        if own is not None and cell != own:
            continue
        end = frames[i + 1].start() if i + 1 < len(frames) else len(output)
        arrow = _ARROW.search(output, m.end(), end)
        line_no = int(n)
        if 1 <= line_no <= len(lines) and lines[line_no - 1].strip():
            found = lines[line_no - 1].strip()
        elif arrow and arrow.group(1).strip():
            found = arrow.group(1).strip()
    if found:
        return found
    arrows: list[str] = [a.strip() for a in _ARROW.findall(output) if a.strip()]
    if arrows:
        return arrows[-1]
    nonblank = [line.strip() for line in lines if line.strip()]
    return nonblank[-1] if nonblank else ""


@lru_cache(maxsize=256)
def code_tokens(code: str) -> frozenset[str]:
    """Identifiers (keywords excluded) and literals (numbers, strings) of a code block (cached:
    the same blocks are compared again at each decision)."""
    out: set[str] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                out.add(tok.string)
            elif tok.type in (tokenize.NUMBER, tokenize.STRING):
                out.add(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        out = {t for t in _FALLBACK_TOKENS.findall(code) if not keyword.iskeyword(t)}
    return frozenset(out)


def code_jaccard(a: str, b: str) -> float:
    ta, tb = code_tokens(a), code_tokens(b)
    union = ta | tb
    return len(ta & tb) / len(union) if union else 1.0


def _norm(line: str) -> str:
    return "".join(line.split())


def shares_statement(statement: str, code: str) -> bool:
    """Whether ``code`` contains ``statement`` as one of its lines (whitespace ignored)."""
    target = _norm(statement)
    return bool(target) and any(_norm(line) == target for line in code.splitlines())


def intent_measures(e0_code: str, e0_output: str, success_code: str) -> tuple[bool, float]:
    """(shares e0's failing statement, token-Jaccard with e0's code): the numbers behind the test."""
    return (shares_statement(failing_statement(e0_code, e0_output), success_code), code_jaccard(e0_code, success_code))


def intent_shifted(e0_code: str, e0_output: str, success_code: str, *, jaccard_min: float = 0.5) -> bool:
    """[default] The successful block no longer computes what e0 computed: it neither shares e0's
    failing statement nor reaches token-Jaccard >= ``jaccard_min`` with e0's code."""
    shares, jaccard = intent_measures(e0_code, e0_output, success_code)
    return not shares and jaccard < jaccard_min


# -- the guard ---------------------------------------------------------------------------------


class Resampling(TypedDict):
    """How the resampled turn is sampled (the one part of a verdict's data the loop acts on)."""

    temperature: float
    seed: int


class PruneTIRData(TypedDict, total=False):
    """The data of PruneTIR's verdicts; which keys a verdict has depends on what it says."""

    # every verdict
    episode: int
    attempts: int  # resolution turns since e0's
    e0_call: int
    erroneous_calls: list[int]  # the episode's erroneous calls, e0 first
    # an erroneous call (an episode opened, a failed attempt, a stuck episode)
    turn_limit: int
    call: int
    timed_out: bool
    # a resolved episode (STP, or a flag when STP is off)
    success_call: int
    intent_shift: bool
    jaccard: float
    shares_failing_statement: bool
    failing_statement: str
    kept_segments: list[int]
    removed_segments: list[int]
    kept_new_strategy: bool
    new_strategy_call: int  # an intent shift: the call where the model switched strategy
    # what STP or STPR cut
    pruned_calls: list[int]
    wtn_saved_chars: int
    # a stuck episode (STPR, RTTS)
    stuck_in_a_row: int
    late_success_call: int
    retry_limit: int
    stpr: bool
    rtts: bool
    suspend_turns: (
        int | None
    )  # RTTS: turns without the tool (the loop brings it back after them); None: the rest of the run
    truncate_to: int
    sampling: Resampling


@dataclass
class _Episode:
    number: int
    e0: int  # call id
    e0_turn: int
    errors: list[int] = field(default_factory=list)  # call ids of the erroneous calls, e0 first


@dataclass
class PruneTIRSettings:
    turn_limit: int = setting(
        3,
        "resolution turns after e0 before the episode counts as stuck (STPR fires at the turn_limit-th failed one)",
        check=lambda v: v >= 1,
        allowed=">= 1",
        tag="default",
    )
    retry_limit: int = setting(
        2,
        "STPRs in a row (no successful call between them) at which RTTS suspends the tool; "
        "that STPR still truncates and resamples",
        check=lambda v: v >= 1,
        allowed=">= 1",
        tag="default",
    )
    resample_temperature: float = setting(
        0.7,
        "temperature of the resampled turn [ours: the paper says to resample, not at what temperature or seed]",
        check=lambda v: 0 < v <= 2,
        allowed="0 < t <= 2",
        tag="default",
    )
    stpr_keeps_reasoning: bool = setting(
        False,
        "STPR keeps the prose of e0's turn and resamples only the tool call [paper: 'resamples a new tool "
        "call conditioned on the interaction history preceding the initial erroneous call']; off [ours]: the "
        "whole turn is resampled, reasoning included, so the model can leave the plan that failed (the "
        "paper's aim: 'explore alternative paths')",
        tag="default",
    )
    resample_seed: int | None = setting(
        None, "seed of the generator that draws each resample's new seed (none: fresh per run)", tag="default"
    )
    intent_jaccard: float = setting(
        0.5,
        "intent shift: token-Jaccard with e0's code below this (and e0's failing statement gone)",
        check=lambda v: 0 <= v <= 1,
        allowed="0..1",
        tag="default",
    )
    stp: bool = setting(True, "Success-Triggered Pruning (off for ablations)", tag="paper")
    stpr: bool = setting(True, "Stuck-Triggered Pruning and Resampling (off for ablations)", tag="paper")
    rtts: bool = setting(True, "Retry-Triggered Tool Suspension (off for ablations)", tag="paper")
    suspend_turns: int | None = setting(
        3,
        "RTTS suspends the tool for this many turns, then it comes back (the paper says 'temporarily' "
        "and gives no length; 3 = the turns turn_limit gives an error to be fixed); none: for the rest of "
        "the run",
        check=lambda v: v >= 1,
        allowed=">= 1, or none",
        tag="default",
    )


class PruneTIR(GuardBase):
    """Prunes fixed tool errors from the context (STP), resamples stuck turns (STPR), then suspends the tool (RTTS).

    The intent-shift test is the method ``intent_test(e0_code, e0_output, success_code) -> bool``:
    override it in a subclass or assign any such function to an instance to swap it.
    """

    name: ClassVar[str] = "prunetir"
    carries_state: ClassVar[bool] = True  # the open error episode, the stuck ones in a row, the seeds drawn
    order: ClassVar[int] = 10
    Settings: ClassVar[type] = PruneTIRSettings
    main_settings = ("turn_limit", "retry_limit", "stp", "stpr", "rtts", "suspend_turns")
    paper_reading = {"stpr_keeps_reasoning": True}
    summary = (("stuck", "stuck"),)

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """Its notes stay in view (a pruned branch's story); a suspension is RTTS's banner."""
        if v.action == SUSPEND:
            return suspension_banner(v, "RTTS: ")
        shown = super().display(v)
        return replace(shown, sticky=True) if shown is not None else None

    @classmethod
    def prune_label(cls, v: VerdictRecord, *, kept: bool) -> tuple[str, str]:
        """STP (an error episode pruned), STPR (truncated to resample), STPR+RTTS (and the tool suspended)."""
        label = "STP" if kept else "STPR+RTTS" if v.action == SUSPEND else "STPR"
        data, bits = verdict_data(v, PruneTIRData), []
        if "episode" in data:
            bits.append(f"episode {data['episode']}")
        if "attempts" in data:
            bits.append(f"{data['attempts']} attempt{'s' if data['attempts'] != 1 else ''}")
        if kept and "intent_shift" in data:
            bits.append("intent shift" if data["intent_shift"] else "no intent shift")
        return label, " · ".join(bits)

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, int]:
        return {"stuck": sum("stuck_in_a_row" in verdict_data(v, PruneTIRData) for v in run.of(cls.name))}

    @classmethod
    def run_budget(cls, settings: PruneTIRSettings) -> dict[str, float]:
        """Tool calls for ``retry_limit`` stuck episodes in a row (e0 and ``turn_limit`` failed
        attempts each: STPR, then RTTS at the last) plus one call that recovers:
        retry_limit * (turn_limit + 1) + 1, 9 with the defaults [ours]."""
        return {"max_tool_calls": settings.retry_limit * (settings.turn_limit + 1) + 1}

    def __init__(self, settings: PruneTIRSettings | None = None):
        self.settings = settings or PruneTIRSettings()
        self.episode: _Episode | None = None
        self.episodes = 0
        self.stuck_in_a_row = 0
        self._rng = random.Random(self.settings.resample_seed)
        self._seeds: set[int] = set()

    def intent_test(self, e0_code: str, e0_output: str, success_code: str) -> bool:
        """[default] :func:`intent_shifted` with this guard's ``intent_jaccard``."""
        return intent_shifted(e0_code, e0_output, success_code, jaccard_min=self.settings.intent_jaccard)

    # -- hook -----------------------------------------------------------------------------------

    def on_tool_result(self, call: Call, view: RunView) -> Verdict | None:
        if not call.executed:  # while the tool is suspended no call is executed
            return None
        erroneous = call.error or call.timed_out
        ep = self.episode
        e0 = _find(view.calls, ep.e0) if ep is not None else None
        if ep is not None and e0 is None:
            ep = self.episode = None  # switched on mid-run, or state from elsewhere: start afresh
        if ep is None or e0 is None:
            if not erroneous:
                self.stuck_in_a_row = 0
                return None
            self.episodes += 1
            self.episode = _Episode(self.episodes, call.call, call.turn, [call.call])
            return Verdict(
                FLAG,
                reason=f"error episode {self.episodes} opened by call {call.call}",
                data=self._counts(self.episode, 0, call),
            )
        attempts = call.turn - ep.e0_turn
        if not erroneous and attempts <= self.settings.turn_limit:
            self.episode = None
            self.stuck_in_a_row = 0
            return self._resolved(ep, e0, call, view, attempts)
        if not erroneous:
            # [paper] stuck: "fails to reach a successful resolution within a predefined Turn Limit"; turns
            # without code (an answer G-STEP sent back) let a success come only after it
            self.episode = None
            self.stuck_in_a_row += 1
            return self._stuck(ep, call, view, attempts, late=True)
        ep.errors.append(call.call)
        if attempts < self.settings.turn_limit:
            return Verdict(
                FLAG,
                reason=f"resolution attempt {attempts}/{self.settings.turn_limit} failed",
                data=self._counts(ep, attempts, call),
            )
        self.episode = None
        self.stuck_in_a_row += 1
        return self._stuck(ep, call, view, attempts)

    # -- STP ------------------------------------------------------------------------------------

    def _resolved(self, ep: _Episode, e0: Call, success: Call, view: RunView, attempts: int) -> Verdict:
        s = self.settings
        base = PruneTIRData(
            episode=ep.number,
            attempts=attempts,
            e0_call=ep.e0,
            success_call=success.call,
            erroneous_calls=list(ep.errors),
        )
        shifted = bool(self.intent_test(e0.code, e0.output, success.code))
        shares, jaccard = intent_measures(e0.code, e0.output, success.code)
        base.update(
            {
                "intent_shift": shifted,
                "jaccard": round(jaccard, 4),
                "shares_failing_statement": shares,
                "failing_statement": failing_statement(e0.code, e0.output),
            }
        )
        if not s.stp or e0.segment is None or success.segment is None:
            why = "STP off" if not s.stp else "e0 is no longer in the context"
            return Verdict(FLAG, reason=f"episode {ep.number} resolved after {attempts} attempt(s) ({why})", data=base)
        segs = view.segments
        start = _turn_start(e0, segs)
        keep = list(range(start))
        if start < e0.segment:
            keep.append(start)  # the reasoning that preceded e0
        switch = self._switch(ep, e0, success, view) if shifted else None
        new_strategy = _prose_before(switch, segs) if switch is not None else None
        if new_strategy is not None and new_strategy > e0.segment:
            keep.append(new_strategy)
        else:
            new_strategy = None
        keep.extend(range(success.segment, len(segs)))
        kept = set(keep)
        removed = [i for i in range(len(segs)) if i not in kept]
        pruned_calls = [c for c in view.calls if c.segment is not None and start <= c.segment < success.segment]
        pruned = [c.call for c in pruned_calls]
        erroneous_pruned = sum(c.executed and (c.error or c.timed_out) for c in pruned_calls)
        others = len(pruned) - erroneous_pruned  # blocks that never ran (refused, skipped): not errors
        if switch is not None:
            base["new_strategy_call"] = switch.call
        base.update(
            {
                "pruned_calls": pruned,
                "kept_segments": keep,
                "removed_segments": removed,
                "kept_new_strategy": new_strategy is not None,
                "wtn_saved_chars": sum(len(segs[i].text) for i in removed),
            }
        )
        return Verdict(
            PRUNE,
            reason=f"STP: episode {ep.number} resolved after {attempts} attempt(s); "
            f"{erroneous_pruned} erroneous call(s) pruned"
            + (f" with {others} block(s) that never ran" if others else "")
            + (" (intent shift kept)" if shifted else ""),
            keep=tuple(keep),
            data=base,
        )

    def _switch(self, ep: _Episode, e0: Call, success: Call, view: RunView) -> Call:
        """Where the model switched to the strategy that succeeded (the intent shifted): the
        episode's first call after e0 that no longer computes what e0 computed and that the
        successful block still computes (by ``intent_test`` both times); the successful call when
        the switch came with it."""
        for call_id in ep.errors[1:]:
            c = _find(view.calls, call_id)
            if (
                c is not None
                and c.segment is not None
                and self.intent_test(e0.code, e0.output, c.code)
                and not self.intent_test(c.code, c.output, success.code)
            ):
                return c
        return success

    # -- STPR / RTTS ----------------------------------------------------------------------------

    def _stuck(self, ep: _Episode, call: Call, view: RunView, attempts: int, late: bool = False) -> Verdict:
        s = self.settings
        n = self.stuck_in_a_row
        rtts = s.rtts and n >= s.retry_limit
        data: PruneTIRData = {
            **self._counts(ep, attempts, call),
            "stuck_in_a_row": n,
            "retry_limit": s.retry_limit,
            "stpr": False,
            "rtts": rtts,
        }
        e0 = _find(view.calls, ep.e0)
        start = None
        if e0 is not None and e0.segment is not None:
            start = e0.segment if s.stpr_keeps_reasoning else _turn_start(e0, view.segments)
        where = f"episode {ep.number} stuck after {attempts} attempt(s)"
        if late:
            data["late_success_call"] = call.call
            where += f" (call {call.call} succeeded only after the turn limit of {s.turn_limit})"
        note, suspended = RTTS_NOTE, f"tool suspended for {s.suspend_turns} turn(s)"
        if rtts:
            data["suspend_turns"] = s.suspend_turns
            self.stuck_in_a_row = 0  # the row is acted on: after the tool is back, a new one counts
            if s.suspend_turns is None:
                note, suspended = RTTS_NOTE_REST, "tool suspended for the rest of the run"
        if s.stpr and start is not None:
            segs = view.segments
            data.update(
                {
                    "stpr": True,
                    "truncate_to": start,
                    "pruned_calls": [c.call for c in view.calls if c.segment is not None and c.segment >= start],
                    "wtn_saved_chars": sum(len(seg.text) for seg in segs[start:]),
                    "sampling": Resampling(temperature=s.resample_temperature, seed=self._new_seed()),
                }
            )
            if rtts:
                return Verdict(
                    SUSPEND,
                    reason=f"STPR #{n} in a row + RTTS: {where}; {suspended}",
                    text=note,
                    truncate_to=start,
                    data=data,
                )
            return Verdict(
                RESAMPLE, reason=f"STPR #{n} in a row: {where}; resampling e0's turn", truncate_to=start, data=data
            )
        if rtts:
            return Verdict(SUSPEND, reason=f"RTTS: {where} ({n} in a row); {suspended}", text=note, data=data)
        why = "STPR off" if not s.stpr else "e0 is no longer in the context"
        return Verdict(FLAG, reason=f"{where} ({why})", data=data)

    # -- helpers --------------------------------------------------------------------------------

    def _counts(self, ep: _Episode, attempts: int, call: Call) -> PruneTIRData:
        return {
            "episode": ep.number,
            "attempts": attempts,
            "turn_limit": self.settings.turn_limit,
            "e0_call": ep.e0,
            "call": call.call,
            "timed_out": call.timed_out,
            "erroneous_calls": list(ep.errors),
        }

    def _new_seed(self) -> int:
        while True:
            seed = self._rng.randrange(1, 2**31)
            if seed not in self._seeds:
                self._seeds.add(seed)
                return seed


def _find(calls: Sequence[Call], call_id: int) -> Call | None:
    return next((c for c in calls if c.call == call_id), None)


def _prose_before(call: Call, segments: Sequence[Segment]) -> int | None:
    """Index of the prose that the call's turn wrote before its code block, or None."""
    i = call.segment
    if i is not None and i > 0 and segments[i - 1].kind == "model" and segments[i - 1].turn == call.turn:
        return i - 1
    return None


def _turn_start(e0: Call, segments: Sequence[Segment]) -> int:
    """Index of the first segment of e0's turn: its prose when it has some, else its code block."""
    if e0.segment is None:
        raise ValueError(f"call {e0.call} is no longer in the context")
    prose = _prose_before(e0, segments)
    return e0.segment if prose is None else prose
