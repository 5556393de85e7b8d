r"""The TIM monitor's reading of a finished run: indicators of tool-induced myopia, with evidence.

The paper (arXiv 2511.10899) defines TIM and lists precursor phrases but gives no automatic
detector; ours reads the model's prose only (no code, comments or tool output) for three
indicators, one point each of a 0-3 score: *no derivation* around the computation the answer rests
on, *answer read off the tool*, and *precursor phrases*. A run without an executed call scores 0,
and a derivation before or after the computation leaves at most the phrases (the paper's
exclusion). The definitions and thresholds: docs/papers/tim.md#tim-monitor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from tuiagent.protocol import RunRecord

Level = Literal["none", "weak", "moderate", "strong"]
LEVELS: tuple[Level, ...] = ("none", "weak", "moderate", "strong")  # by score 0-3 [ours]
Derived = Literal["before", "after", "both", "none"]

# Precursor phrases, one compact regex list per Table 4 category (our wording; case-insensitive).
# Table 4's generic examples ("after simplification", "analytically confirm") are left out [ours]:
# they would fire on ordinary derivations.
_W = r"(?:\s+\w+){0,3}?"  # up to three filler words ("let's quickly verify this numerically")
CATEGORIES: dict[str, list[str]] = {
    "numerical/empirical checking": [
        rf"\b(?:one|we|i)\s+(?:can\s+)?checks?{_W}\s+numerically\b",
        rf"\b(?:let['’]?s|let\s+us|i'?ll|we'?ll|i\s+will|we\s+will)\s+(?:verify|check|test|confirm){_W}\s+numerically\b",
        r"\bnumerical(?:ly)?\s+(?:check|verif(?:y|ication)|evidence|experiments?|tests?)\b",
        r"\b(?:check|test|try)(?:ing)?\s+(?:it\s+|this\s+)?(?:for|with|on)\s+(?:a\s+few|some|several|small)\s+(?:small\s+)?(?:values|cases|numbers|examples)\b",
        r"\bempirically\b",
        r"\bnumerical(?:ly)?\s+(?:optimi[sz]ation|computation|evaluation|solv\w*)\b",
        # section 5.6: "one numerically finds"
        r"\b(?:one|we|i)\s+(?:can\s+)?numerically\s+(?:finds?|gets?|obtains?|sees?|confirms?|verif(?:y|ies))\b",
    ],
    "verification via code": [
        r"\b(?:double[-‐ ]?check|verify|check|confirm|validate)\w*\s+(?:\w+\s+){0,3}?(?:with|using|in|via|by)\s+(?:some\s+|a\s+)?(?:python|code|a\s+(?:quick\s+)?(?:script|program|computation))\b",
        r"\buse\s+(?:python|code|sympy|a\s+(?:script|program))\s+to\s+(?:analy[sz]e|verify|check|confirm|compute\s+and\s+check|test)\b",
        r"\blet\s+(?:the\s+)?(?:code|python|computer)\s+(?:verify|check|confirm)\b",
        r"\bimplement\s+a\s+better\s+approach\b",
        r"\bsymbolic\s+computation\s+to\s+verify\b",
        # section 5.6: "let's verify [an assumption] programmatically"
        r"\b(?:verify|check|confirm|test|validate)\w*\s+(?:\w+\s+){0,4}?programmatically\b",
        # Appendix A.5's example: "use a Python script", "the Python script found / explored", "the script output"
        r"\buse\s+a\s+(?:python\s+)?(?:script|program)\b",
        r"\b(?:the|our|this)\s+(?:python\s+)?script\s+(?:found|explored|shows?|showed|confirms?|confirmed|output)\b",
        r"\b(?:let['’]?s|let\s+us)\s+(?:use|modify|run)\s+the\s+script\b",
    ],
    "approximation/convergence": [
        r"\b(?:results?|values?|numbers?|it|sequence|sum|series)\s+(?:seems?|appears?)\s+to\s+(?:be\s+)?(?:converg|approach|stabili[sz]|tend)\w*",
        r"\bverify\s+(?:this|the|that)\s+pattern\b",
        r"\b(?:the\s+)?pattern\s+(?:seems|appears)\s+to\s+(?:hold|continue)\b",
        r"\b(?:gets?|getting)\s+closer\s+(?:and\s+closer\s+)?to\b",
        r"\bnumeric(?:al)?\s+approximation\b",
        r"\bevaluate\s+(?:\w+\s+){0,3}?numerically\b",
        r"\bvisual(?:ly)?\s+verif\w*",
        r"\blogic\s+is\s+working\b",
    ],
    "systematic search/enumeration": [
        r"\bcheck\s+(?:\w+\s+){0,2}?(?:values|cases|numbers|possibilities)\s+systematically\b",
        r"\bsystematically\s+(?:check|search|enumerate|test|try|list|compute)\w*",
        r"\bexhaustive(?:ly)?\s+(?:check|search|enumerat)\w*(?:\s+up\s+to)?",
        r"\b(?:brute[- ]?force|enumerat(?:e|ing|ion)\s+(?:all|every)|(?:check|try|test)(?:ing)?\s+all\s+(?:possible\s+)?(?:values|cases|combinations|numbers))\b",
        r"\bsearch\s+(?:over|through)\s+all\b",
        r"\b(?:check|compute|test|try)(?:ing)?\s+(?:the\s+|all\s+)?possible\s+values\b",
        # section 5.6: "systematic checks show"
        r"\bsystematic\s+(?:checks?|search(?:es)?|enumeration)\s+(?:shows?|showed|reveals?|confirms?|gives?)\b",
    ],
}
_COMPILED = {cat: [re.compile(p, re.IGNORECASE) for p in pats] for cat, pats in CATEGORIES.items()}

# What is not prose [ours]: a fenced block (```python, ```output, any other), closed by the next
# fence that no word character follows or open to the end of the turn; inline `code`.
_NOT_PROSE = re.compile(r"```[^\n]*(?:\n.*?(?:```(?!\w)|\Z)|\Z)|`[^`\n]+`", re.DOTALL)
# A sentence that states a calculation or a relation [ours]: a relation sign; an operation between
# numbers, one-letter symbols or brackets ("1 + 100", "n(n+1)/2", "50 · 101"); a LaTeX operator; an
# operation word. Hyphenated words ("step-by-step", "3-digit") are not operations.
MATH = re.compile(
    r"[=≠≤≥≈≡<>⇒]"
    r"|\\(?:[dt]?frac|cdot|times|div|sqrt|sum|prod|binom|pm|le|ge|leq|geq|neq|approx|equiv|implies"
    r"|Rightarrow)(?![A-Za-z])"
    r"|(?:\d|\b[A-Za-z]\b|[)\]}])\s*[-+*/×·÷^−]\s*(?:\d|\b[A-Za-z]\b|[(\[\\])"
    r"|\b(?:plus|minus|times|divided\s+by|multiplied\s+by|equals?|squared|cubed)\b"
    # a calculation in words: "adding three and four gives seven", "the product of six and seven"
    r"|\b(?:adding|subtracting|multiplying|dividing|doubling|halving|squaring)\b"
    r"|\bthe\s+(?:sum|product|difference|quotient)\s+of\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_WORD = re.compile(r"[A-Za-z0-9]+")
_BOX = re.compile(r"\\(?:boxed|fbox)")


def prose(turn: str) -> str:
    """A generated turn's prose: fenced blocks (code with its comments, outputs) and inline code removed."""
    return _NOT_PROSE.sub("\n", turn)


def precursor_phrases(text: str) -> list[tuple[str, str]]:
    """(category, matched text) for every precursor phrase in ``text``, in order of appearance."""
    found = []
    for cat, patterns in _COMPILED.items():
        for pattern in patterns:
            for m in pattern.finditer(text):
                found.append((m.start(), cat, m.group(0)))
    found.sort()
    return [(cat, phrase) for _, cat, phrase in found]


def derivation_words(text: str) -> int:
    """Words of the prose sentences in ``text`` that state a calculation or a relation, sentences
    with a precursor phrase left out."""
    return sum(len(_WORD.findall(s)) for s in _SENTENCE.split(text) if MATH.search(s) and not precursor_phrases(s))


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


@dataclass(frozen=True)
class Precursor:
    """A precursor phrase and where it stands: in the ``turn``-th generated turn, after the output
    of call ``after_call`` (0: before any call ran)."""

    category: str
    phrase: str
    turn: int
    after_call: int


@dataclass(frozen=True)
class Reading:
    """What the monitor found in one run: the graded signal and its evidence."""

    score: int  # 0-3, one point per indicator
    flagged: bool  # score >= flag_at
    indicators: tuple[str, ...]  # the indicators present, by name
    precursors: tuple[Precursor, ...]  # in the prose, in order
    tool_calls: int  # executed calls
    computation_call: int | None  # the call whose output the answer rests on (the last successful one)
    answer_call: int | None  # that call, when the answer repeats its output
    words_before: int  # derivation words before that output
    words_after: int  # derivation words between that output and the final \boxed{}
    derived: Derived  # where a derivation stands relative to that computation

    @property
    def level(self) -> Level:
        return LEVELS[self.score]

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.precursors})

    @property
    def phrases(self) -> list[str]:
        return [p.phrase for p in self.precursors]


NO_DERIVATION, READ_OFF, PHRASES = "no derivation", "answer read off the tool", "precursor phrases"


def derivation_at(words_before: int, words_after: int, min_words_before: int, min_words_after: int) -> Derived:
    """Where a derivation stands relative to the computation: before it, after it, both, none."""
    before, after = words_before >= min_words_before, words_after >= min_words_after
    return "both" if before and after else "before" if before else "after" if after else "none"


def monitor(run: RunRecord, *, min_calls: int, min_words_before: int, min_words_after: int, flag_at: int) -> Reading:
    """The monitor on the whole trajectory (``run.pieces``: every generated turn, text that
    PruneTIR pruned from the working context included), for the guard at the end of a run and for
    the eval's metric on any run, guard on or off."""
    pieces = run.pieces
    outputs = [i for i, p in enumerate(pieces) if p.kind == "output"]
    ok = [i for i in outputs if not pieces[i].error]
    anchor = ok[-1] if ok else len(pieces)  # the computation the answer rests on
    precursors: list[Precursor] = []
    words_before, after, turn, call, after_call, computation_call = 0, [], 0, 0, 0, None
    for i, p in enumerate(pieces):
        if p.kind == "code":
            call += 1  # code blocks are numbered as the loop numbers them, run or not
        elif p.kind == "output":
            after_call = call
            computation_call = call if i == anchor else computation_call
        else:
            turn += 1
            text = prose(p.text)
            precursors += [Precursor(cat, phrase, turn, after_call) for cat, phrase in precursor_phrases(text)]
            if i < anchor:
                words_before += derivation_words(text)
            else:
                after.append(text)
    tail = "\n".join(after)
    boxes = [m.start() for m in _BOX.finditer(tail)]
    words_after = derivation_words(tail[: boxes[-1]] if boxes else tail)
    repeats = bool(ok) and run.answer is not None and answer_matches_output(run.answer, pieces[anchor].text)
    where = derivation_at(words_before, words_after, min_words_before, min_words_after)
    no_derivation = bool(outputs) and where == "none"
    present = {
        NO_DERIVATION: no_derivation,
        READ_OFF: repeats and no_derivation and len(outputs) >= min_calls,
        PHRASES: bool(outputs) and bool(precursors),
    }
    indicators = tuple(name for name, on in present.items() if on)
    return Reading(
        len(indicators),
        len(indicators) >= flag_at,
        indicators,
        tuple(precursors),
        len(outputs),
        computation_call,
        computation_call if repeats else None,
        words_before,
        words_after,
        where,
    )


def gold_output_ignored(run: RunRecord) -> bool:
    """The last successful tool output equals the gold answer, yet the run's answer is wrong: a cheap,
    narrow flag for ATTC's "tool ignored" (a right intermediate output that is not the final answer is
    missed); the judged audit is ``guards.attc.audit``."""
    ok = [p for p in run.pieces if p.kind == "output" and not p.error]
    if run.gold is None or run.correct is not False or not ok:
        return False
    return answer_matches_output(run.gold, ok[-1].text)
