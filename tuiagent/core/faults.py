"""Injected tool faults: what the model reads in place of a tool output (issue 41; docs/evaluating.md,
"Injected faults").

A fault is a pure function of the code, the output the kernel really gave (as the model would have
read it), the previous call's output, the kind and a seed: the same inputs give the same text on
every machine (the seed comes from ``fault_seed``, a SHA-256 of the problem and the run's seed,
never from ``hash()``). The loop applies a ``FaultPlan`` (the eval's ``--inject``, ``solve
--inject``) or a fault a person armed in the app (``FaultInjector.arm``) at tool-output time,
records an ``Intervention`` right before the corrupted output, and the guards see the output
exactly as the model does. Every rule here is ours ([ours]).
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tuiagent.errors import UserError

WRONG_NUMBER, ERROR, EMPTY, TIMEOUT, STALE = "wrong-number", "error", "empty", "timeout", "stale"
KINDS: tuple[str, ...] = (WRONG_NUMBER, ERROR, EMPTY, TIMEOUT, STALE)
DESCRIPTIONS = {
    WRONG_NUMBER: "the last number of the output changed by a plausible amount",
    ERROR: "a traceback for a line of the code in place of the output",
    EMPTY: "the output is empty",
    TIMEOUT: "the call reported as timed out",
    STALE: "the previous call's output repeated",
}
# [ours] wrong-number: the relative change, drawn by the seed; the sign too (never to zero or across it)
FACTORS = (0.1, 0.2, 0.25, 0.5)
WRONG_NUMBER_RULE = (
    "the last number of the output times 1 ± f, f drawn by the seed from 10%, 20%, 25%, 50% and the sign by the "
    "seed (up when down would reach zero or change its sign), rounded to the number's own decimals and at least "
    "one unit of its last digit away [ours]"
)
ERROR_RULE = (
    "an IPython-style traceback: NameError at the last line that reads a name the cell does not bind itself (an "
    "earlier cell's; the name drawn by the seed), else ZeroDivisionError at the last line that divides, else "
    "NameError at the last line that reads a name, else ZeroDivisionError at the last line [ours]"
)
TIMEOUT_RULE = "the kernel's own timeout message for the call's limit, the cell's output lost [ours]"
STALE_RULE = "the previous executed call's output as the model read it; empty at the first call [ours]"
EMPTY_RULE = "no output at all [ours]"
RULES = {
    WRONG_NUMBER: WRONG_NUMBER_RULE,
    ERROR: ERROR_RULE,
    EMPTY: EMPTY_RULE,
    TIMEOUT: TIMEOUT_RULE,
    STALE: STALE_RULE,
}
TIMEOUT_NOTE = "Execution timed out after {timeout:g} s and was interrupted; variables from earlier cells are kept."

# a number as printed: not part of a name, a version or a longer number (commas of thousands are kept)
_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]\d|\w)")
_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:[+\-*/%]|//|\*\*)?=(?!=)", re.MULTILINE)
_FOR = re.compile(r"\bfor\s+([\w\s,()]+?)\s+in\b")
_DEF = re.compile(r"^\s*(?:def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)
_IMPORT = re.compile(r"^\s*(?:from\s+\S+\s+)?import\s+(.+)$", re.MULTILINE)
_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")
_STRINGS = re.compile(r"(?<![\w])[rRbBuUfF]{0,2}(?:(\"\"\"|''')[\s\S]*?\1|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')")
_RULE_LINE = "-" * 75


class FaultKindError(UserError):
    """An unknown fault kind on the command line (exit 2, as a bad option's)."""

    exit_code = 2


def parse_kinds(text: str | Iterable[str]) -> list[str]:
    """``wrong-number,error`` (or several such strings) as a list of kinds; an unknown one is a UserError
    (exit 2) that names the kinds there are."""
    parts = [text] if isinstance(text, str) else list(text)
    kinds = [k.strip() for p in parts for k in p.split(",") if k.strip()]
    for kind in kinds:
        if kind not in KINDS:
            raise FaultKindError(f"unknown fault kind {kind!r}; use {', '.join(KINDS)}")
    return list(dict.fromkeys(kinds))


def fault_seed(*parts: object) -> int:
    """A seed from the parts (problem id, run seed, kind ...): the first 8 bytes of their SHA-256."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


@dataclass(frozen=True)
class FaultPlan:
    """Which fault a run's tool outputs get: ``kind`` at the ``at``-th executed call (from 1); with
    ``broken``, every later call whose code is the same (whitespace at its ends aside) gets it too.
    ``seed``: the fault's own (``fault_seed``); ``by``: "protocol" (an eval, ``solve --inject``) or
    "person"."""

    kind: str
    at: int = 1
    broken: bool = False
    seed: int = 0
    by: str = "protocol"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; use {', '.join(KINDS)}")
        if self.at < 1:
            raise ValueError("a fault's call is counted from 1")

    @property
    def label(self) -> str:
        """The plan in a word, as an eval's variant names it: ``wrong-number``, ``error@2``, ``empty+broken``."""
        return self.kind + (f"@{self.at}" if self.at != 1 else "") + ("+broken" if self.broken else "")

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, "broken": self.broken, "seed": self.seed, "by": self.by}


@dataclass(frozen=True)
class Fault:
    """A corrupted output: ``text`` is what the model reads; the flags are the ones its ToolResult
    carries; ``detail`` says how it was made (its rule, the value changed, the seed) and
    ``supports`` is the value only this output supports (None when it supports none)."""

    kind: str
    text: str
    error: bool = False
    timed_out: bool = False
    error_name: str | None = None
    supports: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def numbers(text: str) -> list[re.Match[str]]:
    """The numbers printed in ``text``, in order."""
    return list(_NUMBER.finditer(text))


def _value(token: str) -> float:
    return float(token.replace(",", ""))


def _format(value: float, decimals: int, commas: bool) -> str:
    if decimals == 0:
        text = f"{round(value):,d}" if commas else str(round(value))
    else:
        text = f"{value:,.{decimals}f}" if commas else f"{value:.{decimals}f}"
    return text


def wrong_number(shown: str, seed: int) -> Fault:
    """The last number of ``shown`` changed by WRONG_NUMBER_RULE; unchanged (``applied`` false) when
    the output has no number."""
    found = numbers(shown)
    if not found:
        return Fault(WRONG_NUMBER, shown, detail={"rule": WRONG_NUMBER_RULE, "applied": False, "seed": seed})
    match = found[-1]
    token = match.group(0)
    value = _value(token)
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    unit = 10.0**-decimals
    factor = FACTORS[seed % len(FACTORS)]
    sign = 1 if (seed >> 8) % 2 == 0 else -1
    step = max(abs(value) * factor, unit)
    new = value + sign * step
    if value > 0 and new <= 0 or value < 0 and new >= 0:
        new = value - sign * step
    new = round(new / unit) * unit if decimals else float(round(new))
    if math.isclose(new, value):
        new = value + unit if value >= 0 else value - unit
    text = _format(new, decimals, "," in token)
    out = shown[: match.start()] + text + shown[match.end() :]
    supports = text.replace(",", "")
    return Fault(
        WRONG_NUMBER,
        out,
        supports=supports,
        detail={
            "rule": WRONG_NUMBER_RULE,
            "applied": True,
            "seed": seed,
            "factor": factor,
            "sign": "+" if new > value else "-",
            "old": token,
            "new": text,
            "at": match.start(),
        },
    )


def _code_lines(code: str) -> list[str]:
    return code.strip("\n").splitlines() or [""]


def _names_read(line: str) -> list[str]:
    """The names a line reads: not keywords, builtins, attributes, strings, call targets nor the
    names it assigns."""
    body = _STRINGS.sub('""', line.split("#", 1)[0])
    target = _ASSIGNED.match(body)
    if target is not None:
        body = body[target.end() :]
    out = []
    for m in _NAME.finditer(body):
        name = m.group(1)
        rest = body[m.end() :].lstrip()
        if keyword.iskeyword(name) or hasattr(builtins, name) or rest.startswith("("):
            continue
        if rest.startswith("=") and not rest.startswith("=="):  # a keyword argument
            continue
        out.append(name)
    return list(dict.fromkeys(out))


def traceback_text(code: str, line_no: int, error_name: str, message: str, cell: int) -> str:
    """The traceback IPython prints for an exception at ``line_no`` (from 1) of a cell: the rule,
    the exception's name with "Traceback (most recent call last)", ``Cell In[n], line k``, the
    lines around it with an arrow at the line, and the exception."""
    lines = _code_lines(code)
    first, last = max(1, line_no - 2), min(len(lines), line_no + 2)
    width = len(str(last))
    context = []
    for i in range(first, last + 1):
        mark = "---->" if i == line_no else "     "
        context.append(f"{mark} {i:>{width}} {lines[i - 1]}".rstrip())
    return "\n".join(
        [
            _RULE_LINE,
            f"{error_name:<42}Traceback (most recent call last)",
            f"Cell In[{cell}], line {line_no}",
            *context,
            "",
            f"{error_name}: {message}",
        ]
    )


def _imported(code: str) -> set[str]:
    names = set()
    for m in _IMPORT.finditer(code):
        for part in m.group(1).split(","):
            words = part.strip("() ").split()
            if words:
                names.add(words[-1].split(".")[0])
    return names


def _defined(code: str) -> set[str]:
    """The names a cell binds itself: assigned, imported, loop and comprehension targets, defined."""
    names = {m.group(1) for m in _ASSIGNED.finditer(code)} | _imported(code)
    names |= {n for m in _FOR.finditer(code) for n in re.findall(r"[A-Za-z_]\w*", m.group(1))}
    names |= {m.group(1) for m in _DEF.finditer(code)}
    return names


def error_fault(code: str, seed: int, cell: int) -> Fault:
    """A traceback for a line of ``code`` by ERROR_RULE."""
    lines = _code_lines(code)
    defined = _defined(code)
    candidates = [
        (i, _names_read(line))
        for i, line in enumerate(lines, 1)
        if line.strip() and not line.strip().startswith(("#", "import ", "from "))
    ]
    outside = [(i, [n for n in names if n not in defined]) for i, names in candidates]
    outside = [(i, names) for i, names in outside if names]
    divides = [i for i, line in enumerate(lines, 1) if "/" in _STRINGS.sub('""', line.split("#", 1)[0])]
    imported = _imported(code)
    reading = [(i, [n for n in names if n not in imported]) for i, names in candidates]
    reading = [(i, names) for i, names in reading if names]
    chosen = outside[-1] if outside else None if divides else reading[-1] if reading else None
    if chosen is not None:
        line_no, names = chosen
        name = names[seed % len(names)]
        error_name, message, value = "NameError", f"name '{name}' is not defined", name
    else:
        line_no = divides[-1] if divides else (candidates[-1][0] if candidates else len(lines))
        error_name, message, value = "ZeroDivisionError", "division by zero", None
    return Fault(
        ERROR,
        traceback_text(code, line_no, error_name, message, cell),
        error=True,
        error_name=error_name,
        detail={
            "rule": ERROR_RULE,
            "applied": True,
            "seed": seed,
            "line": line_no,
            "exception": error_name,
            "name": value,
        },
    )


def corrupt(
    kind: str,
    *,
    code: str,
    shown: str,
    previous: str | None,
    seed: int,
    call: int = 1,
    timeout_s: float = 30.0,
) -> Fault:
    """What the model reads instead of ``shown`` (the kernel's real output as the model would have
    read it) under fault ``kind``. ``previous``: the previous executed call's output as the model
    read it (None at the first); ``call``: the cell's number (``Cell In[n]``); ``timeout_s``: the
    call's time limit (the timeout message states it)."""
    if kind == WRONG_NUMBER:
        return wrong_number(shown, seed)
    if kind == ERROR:
        return error_fault(code, seed, call)
    if kind == EMPTY:
        return Fault(EMPTY, "", detail={"rule": EMPTY_RULE, "applied": True, "seed": seed})
    if kind == TIMEOUT:
        return Fault(
            TIMEOUT,
            TIMEOUT_NOTE.format(timeout=timeout_s),
            error=True,
            timed_out=True,
            detail={"rule": TIMEOUT_RULE, "applied": True, "seed": seed, "timeout_s": timeout_s},
        )
    if kind == STALE:
        text = previous if previous is not None else ""
        real = {_value(m.group(0)) for m in numbers(shown)}
        old = numbers(text)
        supports = old[-1].group(0).replace(",", "") if old and _value(old[-1].group(0)) not in real else None
        return Fault(
            STALE,
            text,
            supports=supports,
            detail={"rule": STALE_RULE, "applied": True, "seed": seed, "previous": previous is not None},
        )
    raise ValueError(f"unknown fault kind {kind!r}; use {', '.join(KINDS)}")


class FaultInjector:
    """The faults one run's tool outputs get: a plan fixed before it starts and faults armed while it
    runs (the app's key), each armed one for the next executed call. The loop asks ``fault`` at
    every executed call."""

    def __init__(self, plan: FaultPlan | None = None):
        self.plan = plan
        self.armed: list[FaultPlan] = []
        self.executed = 0
        self._broken: dict[str, FaultPlan] = {}

    def arm(self, kind: str, *, by: str = "person") -> FaultPlan:
        """Arm ``kind`` for the next executed tool output; its seed is drawn there from the run and call."""
        plan = FaultPlan(kind, at=1, by=by)
        self.armed.append(plan)
        return plan

    @property
    def pending(self) -> str | None:
        """The kind armed for the next output, if any."""
        return self.armed[0].kind if self.armed else None

    def fault(
        self,
        *,
        run_id: str,
        call: int,
        code: str,
        shown: str,
        previous: str | None,
        timeout_s: float,
    ) -> tuple[FaultPlan, Fault] | None:
        """The fault this executed call gets (and the plan it comes from), or None."""
        self.executed += 1
        plan: FaultPlan | None = None
        repeat = False
        key = code.strip()
        if self.armed:
            armed = self.armed.pop(0)
            plan = FaultPlan(armed.kind, at=self.executed, seed=fault_seed(run_id, call, armed.kind), by=armed.by)
        elif self.plan is not None and self.executed == self.plan.at:
            plan = self.plan
            if plan.broken:
                self._broken[key] = plan
        elif key in self._broken:
            plan, repeat = self._broken[key], True
        if plan is None:
            return None
        fault = corrupt(
            plan.kind, code=code, shown=shown, previous=previous, seed=plan.seed, call=call, timeout_s=timeout_s
        )
        detail = {**fault.detail, "plan": plan.record(), "executed_call": self.executed, "supports": fault.supports}
        if repeat:
            detail["repeat"] = True
        return plan, Fault(
            fault.kind, fault.text, fault.error, fault.timed_out, fault.error_name, fault.supports, detail
        )
