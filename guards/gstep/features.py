r"""G-STEP's 120 gate features, one code path for the guard (online) and the trainer (offline).

A :class:`GateInput` is built from the loop's :class:`~guards.base.RunView` at an answer attempt
(:func:`gate_input_from_view`) or from a compact collection record
(``guards.gstep.training.gate_input_from_record``); :func:`features` turns it into the vector:
24 numeric features (``NUMERIC_NAMES``, each defined in ``DEFINITIONS``), then hashed bins over
the reasoning text (or, for a gate trained so, the candidate final text: ``TEXT_BINS``) and the
last successful output. The layout, the hashing, the terms the
definitions use and the frame the gate was trained in: docs/papers/tool-use-tax.md#g-step.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuiagent.parsing import final_answer, last_closed_block
from tuiagent.protocol import RunPiece, RunView

N_NUMERIC, N_TEXT_BINS, N_OUTPUT_BINS = 24, 64, 32
N_FEATURES = N_NUMERIC + N_TEXT_BINS + N_OUTPUT_BINS  # 120
# What the 64 text bins hash: "reasoning" [paper, Appendix I.2.2: "The reasoning text yields a
# 64-dimensional vector"], or "final", the answering turn's text [ours: the gates trained before
# 2026-12-07 were, and a gate file says which it was trained on].
TEXT_BINS = ("reasoning", "final")

NUMERIC_NAMES = [
    "turn_index",
    "successful_calls",
    "error_count",
    "budget_remaining",
    "last_two_output_diff",
    "output_stagnation",
    "output_is_numeric",
    "last_output_magnitude",
    "pred_matches_last_success",
    "pred_matches_any_tool_output",
    "last_success_in_reasoning",
    "reasoning_lastnum_vs_last_success_diff",
    "pred_in_reasoning",
    "tool_output_in_reasoning_frac",
    "reasoning_length",
    "reasoning_step_count",
    "reasoning_has_uncertainty",
    "n_numbers_in_reasoning",
    "n_chunks_seen",
    "n_pred_evidence_ids",
    "evidence_coverage_ratio",
    "n_distinct_outputs",
    "all_outputs_same",
    "expression_complexity",
]
FEATURE_NAMES = (
    NUMERIC_NAMES + [f"text_hash_{i}" for i in range(N_TEXT_BINS)] + [f"output_hash_{i}" for i in range(N_OUTPUT_BINS)]
)

# One line per numeric feature: its exact definition (shown by docs and tests).
DEFINITIONS = {
    "turn_index": "1-based index of the turn that gives this answer (RunView.turn)",
    "successful_calls": "number of executed calls without error",
    "error_count": "number of executed calls with an exception or a timeout",
    "budget_remaining": "tool calls left in the gate's frame: B - executed calls, floored at 0, B = the tool budget "
    "the gate was trained at (not the run's; blocks not run -- the budget note, a guard's skip, "
    "a declined block -- use none of it, as in the loop)",
    "last_two_output_diff": "log1p(|a-b|), a and b the values of the last two successful outputs that have a "
    "number; 0 with fewer than two",
    "output_stagnation": "1 if the last two successful outputs are equal (normalised); else 0",
    "output_is_numeric": "1 if the last successful output has a number; else 0",
    "last_output_magnitude": "log10(1+|v|), v the value of the last successful output; 0 if none",
    "pred_matches_last_success": "1 if the pred value equals the value of the last successful output "
    "(non-numeric pred: equals that output, normalised); else 0",
    "pred_matches_any_tool_output": "1 if the pred value equals any number in any successful output "
    "(non-numeric pred: is contained in one); else 0",
    "last_success_in_reasoning": "1 if the value of the last successful output equals a number in the reasoning",
    "reasoning_lastnum_vs_last_success_diff": "log1p(|r-v|), r the last number in the reasoning, v the value of "
    "the last successful output; 0 if either is missing",
    "pred_in_reasoning": "1 if the pred value equals a number in the reasoning (non-numeric pred: contained in "
    "the reasoning, normalised); else 0",
    "tool_output_in_reasoning_frac": "share of successful outputs with a number whose value equals a number in "
    "the reasoning; 0 when none has a number",
    "reasoning_length": "number of whitespace-separated words in the reasoning",
    "reasoning_step_count": "case-insensitive matches of 'step N', then, next, finally, first, second, third "
    "(whole words) in the reasoning, plus its ';' characters",
    "reasoning_has_uncertainty": "1 if the reasoning has maybe, might, possibly, not sure, guess, probably, "
    "approximately or around (whole words, any case); else 0",
    "n_numbers_in_reasoning": "number of numbers in the reasoning",
    "n_chunks_seen": "0 (a retrieval feature in the paper; no meaning with a code tool)",
    "n_pred_evidence_ids": "0 (retrieval feature)",
    "evidence_coverage_ratio": "0 (retrieval feature)",
    "n_distinct_outputs": "number of distinct successful outputs (normalised)",
    "all_outputs_same": "1 if there are at least two successful outputs and all are equal (normalised); else 0",
    "expression_complexity": "in the normalised code of the last executed call: arithmetic operators "
    "(** // + - * / %) plus function calls (name followed by '('); 0 without calls",
}

NUMBER = re.compile(r"(?<![A-Za-z_\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
HASH_TOKEN = re.compile(r"[A-Za-z0-9_./%-]+")
_STEP_WORDS = re.compile(r"\bstep\s*\d+\b|\b(?:then|next|finally|first|second|third)\b", re.IGNORECASE)
_UNCERTAIN = re.compile(r"\b(?:maybe|might|possibly|not sure|guess|probably|approximately|around)\b", re.IGNORECASE)
_FENCED = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_OPERATORS = re.compile(r"\*\*|//|[-+*/%]")
_FUNC_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")


@dataclass(frozen=True)
class GateInput:
    """The state of a run at an answer attempt, as far as the gate needs it.

    ``calls``: executed calls, in order, as (code, shown output, error = exception or timeout).
    ``budget``: tool calls left in the gate's budget frame. ``reasoning`` and ``final_text``: see
    the module docstring.
    """

    turn_index: int
    calls: tuple[tuple[str, str, bool], ...]
    reasoning: str
    final_text: str
    budget: int


# -- building GateInput ---------------------------------------------------------------------------


def reasoning_text(turns: Sequence[tuple[str, int | None]]) -> str:
    r"""The reasoning from the turns of a run, each as (text, where the code block it asked to run
    starts, or None): the prose before each such block (an answering turn: all of it), non-empty
    pieces joined by newlines, fenced blocks removed, cut before the last \boxed."""
    prose = [text[:start] if start is not None else text for text, start in turns]
    text = _FENCED.sub(" ", "\n".join(p for p in prose if p))
    cut = text.rfind("\\boxed")
    return text[:cut] if cut >= 0 else text


def turns_of(pieces: Sequence[RunPiece]) -> list[tuple[str, int | None]]:
    """The turns of a recorded run (``RunView.trajectory``) as :func:`reasoning_text` takes them: a
    turn followed by a code piece asked to run its last closed block (the loop's own rule)."""
    out = []
    for i, piece in enumerate(pieces):
        if piece.kind != "turn":
            continue
        asked = i + 1 < len(pieces) and pieces[i + 1].kind == "code"
        block = last_closed_block(piece.text) if asked else None
        out.append((piece.text, block.start if block is not None else None))
    return out


def budget_remaining(max_tool_calls: int, executed_calls: int) -> int:
    """Tool calls a budget of ``max_tool_calls`` still allows: only executed calls use it up, as the
    loop counts them (``RunView.tool_calls_left``). The guard (online) and the trainer (offline)
    both count with this."""
    return max(0, int(max_tool_calls) - int(executed_calls))


def gate_input_from_view(view: RunView, trained_budget: int) -> GateInput:
    """Online: the loop's view at ``on_answer``: the calls and the whole trajectory (the answering
    turn included), the budget counted in the frame of ``trained_budget``."""
    calls = tuple((c.code, c.output, bool(c.error or c.timed_out)) for c in view.calls if c.executed)
    return GateInput(
        turn_index=int(view.turn),
        calls=calls,
        reasoning=reasoning_text(turns_of(view.trajectory)),
        final_text=view.turn_text,
        budget=budget_remaining(trained_budget, len(calls)),
    )


# -- helpers ---------------------------------------------------------------------------------------


def numbers(text: str) -> list[float]:
    """The finite numbers in a text, in order (thousands separators removed)."""
    out = []
    for m in NUMBER.finditer(text or ""):
        try:
            v = float(m.group().replace(",", ""))
        except ValueError:  # pragma: no cover - the pattern only matches numbers
            continue
        if math.isfinite(v):
            out.append(v)
    return out


def value(text: str) -> float | None:
    """The last number of a text, or None."""
    found = numbers(text)
    return found[-1] if found else None


def same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def norm_text(text: str) -> str:
    return " ".join((text or "").split())


def boxed(text: str) -> str | None:
    return final_answer(text or "")


def answer_value(answer: str | None) -> float | None:
    r"""The pred value: ``\frac{a}{b}`` -> a/b, then the last number once ``$``, ``%``, ``\text{..}``,
    ``\,`` and ``\!`` are removed; None when there is none."""
    if not answer:
        return None
    s = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", _frac, answer)
    s = re.sub(r"\\text\s*\{[^{}]*\}", " ", s)
    s = s.replace("\\$", " ").replace("$", " ").replace("\\%", " ").replace("%", " ")
    s = s.replace("\\,", "").replace("\\!", "")
    return value(s)


def _frac(m: re.Match[str]) -> str:
    a, b = value(m.group(1)), value(m.group(2))
    if a is None or b is None or b == 0:
        return " "
    return f" {a / b!r} "


def normalise_code(code: str) -> str:
    """Python tokens without comments, joined by single spaces; on a tokenize error, the stripped,
    non-empty lines with runs of whitespace collapsed, joined by newlines."""
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENCODING,
        tokenize.ENDMARKER,
    }
    try:
        parts = [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in skip]
        return " ".join(parts)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(" ".join(line.split()) for line in code.splitlines() if line.strip())


def hashed(text: str, n_bins: int) -> np.ndarray:
    """Token counts of the lower-cased text in md5 bins, L2-normalised (an empty text stays zeros)."""
    vec = np.zeros(n_bins, dtype=np.float64)
    for token in HASH_TOKEN.findall((text or "").lower()):
        vec[int(hashlib.md5(token.encode("utf-8")).hexdigest(), 16) % n_bins] += 1.0
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec


# -- the features ----------------------------------------------------------------------------------


def numeric_features(inp: GateInput) -> dict[str, float]:
    """The 24 numeric features by name (definitions in :data:`DEFINITIONS`)."""
    executed = inp.calls
    outputs = [out for _, out, err in executed if not err]
    normed = [norm_text(o) for o in outputs]
    values = [v for v in (value(o) for o in outputs) if v is not None]
    last_out = outputs[-1] if outputs else None
    last_v = value(last_out) if last_out is not None else None
    reasoning = inp.reasoning
    r_nums = numbers(reasoning)
    pred = boxed(inp.final_text)
    pred_v = answer_value(pred)
    pred_n = norm_text(pred or "")

    def in_reasoning(v: float) -> bool:
        return any(same(v, r) for r in r_nums)

    if pred is None:
        matches_last = matches_any = in_r = 0.0
    elif pred_v is not None:
        matches_last = float(last_v is not None and same(pred_v, last_v))
        matches_any = float(any(same(pred_v, n) for o in outputs for n in numbers(o)))
        in_r = float(in_reasoning(pred_v))
    else:
        matches_last = float(last_out is not None and bool(pred_n) and pred_n == norm_text(last_out))
        matches_any = float(bool(pred_n) and any(pred_n in n for n in normed))
        in_r = float(bool(pred_n) and pred_n in norm_text(reasoning))
    output_values = [value(o) for o in outputs]
    with_number = [v for v in output_values if v is not None]
    last_code = normalise_code(executed[-1][0]) if executed else ""
    return {
        "turn_index": float(inp.turn_index),
        "successful_calls": float(len(outputs)),
        "error_count": float(sum(1 for *_, err in executed if err)),
        "budget_remaining": float(max(0, inp.budget)),
        "last_two_output_diff": math.log1p(abs(values[-1] - values[-2])) if len(values) >= 2 else 0.0,
        "output_stagnation": float(len(normed) >= 2 and normed[-1] == normed[-2]),
        "output_is_numeric": float(last_v is not None),
        "last_output_magnitude": math.log10(1.0 + abs(last_v)) if last_v is not None else 0.0,
        "pred_matches_last_success": matches_last,
        "pred_matches_any_tool_output": matches_any,
        "last_success_in_reasoning": float(last_v is not None and in_reasoning(last_v)),
        "reasoning_lastnum_vs_last_success_diff": (
            math.log1p(abs(r_nums[-1] - last_v)) if r_nums and last_v is not None else 0.0
        ),
        "pred_in_reasoning": in_r,
        "tool_output_in_reasoning_frac": (
            sum(in_reasoning(v) for v in with_number) / len(with_number) if with_number else 0.0
        ),
        "reasoning_length": float(len(reasoning.split())),
        "reasoning_step_count": float(len(_STEP_WORDS.findall(reasoning)) + reasoning.count(";")),
        "reasoning_has_uncertainty": float(bool(_UNCERTAIN.search(reasoning))),
        "n_numbers_in_reasoning": float(len(r_nums)),
        "n_chunks_seen": 0.0,
        "n_pred_evidence_ids": 0.0,
        "evidence_coverage_ratio": 0.0,
        "n_distinct_outputs": float(len(set(normed))),
        "all_outputs_same": float(len(normed) >= 2 and len(set(normed)) == 1),
        "expression_complexity": float(len(_OPERATORS.findall(last_code)) + len(_FUNC_CALL.findall(last_code))),
    }


def last_success_output(inp: GateInput) -> str:
    outputs = [out for _, out, err in inp.calls if not err]
    return outputs[-1] if outputs else ""


def features(inp: GateInput, text_bins: str = "reasoning") -> np.ndarray:
    """The 120-dim vector: 24 numeric, 64 bins over the text ``text_bins`` names (``TEXT_BINS``), 32
    over the last successful output."""
    if text_bins not in TEXT_BINS:
        raise ValueError(f"text_bins must be one of {', '.join(TEXT_BINS)}, not {text_bins!r}")
    numeric = numeric_features(inp)
    vec = np.concatenate(
        [
            np.array([numeric[n] for n in NUMERIC_NAMES], dtype=np.float64),
            hashed(inp.reasoning if text_bins == "reasoning" else inp.final_text, N_TEXT_BINS),
            hashed(last_success_output(inp), N_OUTPUT_BINS),
        ]
    )
    assert vec.shape == (N_FEATURES,)
    return vec
