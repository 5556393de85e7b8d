"""Math as a reader reads it: the LaTeX a model writes in its prose turned into Unicode for display.

``\\(3 \\times 17\\)`` reads ``3 × 17``, ``\\[ 288 - 150 = 138 \\]`` reads ``288 - 150 = 138``,
``\\boxed{42}`` reads ``⟦42⟧``. Inline ``\\( \\)`` and ``$ $``, display ``\\[ \\]`` and ``$$ $$``,
and a bare ``\\boxed{}`` are converted with pylatexenc (a well-kept LaTeX parser, its macro tables
extended here for what math models write: ``\\dfrac``, ``\\binom``, ``x^{n+1}``...). Code (fenced
blocks, inline backticks) is never touched; a ``$`` counts as math only under Pandoc's rule (so
``$5 and $10`` stays money); a span pylatexenc cannot parse, or that uses a macro it does not know,
is shown as written. Only what is shown changes: trajectories keep the verbatim text.

The text is cut into :class:`Piece` s that keep their source offsets, so token confidence can be
drawn over the rendered text (``TokenSpans.through``), and paragraphs are cached, so a streaming
turn renders only its last paragraph again. docs/app.md#math-as-you-read-it says what a user sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, SpecialsTextSpec
from pylatexenc.latex2text import get_default_latex_context_db as _text_db
from pylatexenc.latexwalker import (
    LatexEnvironmentNode,
    LatexGroupNode,
    LatexMacroNode,
    LatexMathNode,
    LatexSpecialsNode,
    LatexWalker,
    LatexWalkerError,
)
from pylatexenc.latexwalker import get_default_latex_context_db as _parse_db
from pylatexenc.macrospec import MacroStandardArgsParser, SpecialsSpec, std_macro

# How a boxed answer reads (ours: brackets no model writes around an answer of its own).
BOX = ("⟦", "⟧")


@dataclass(frozen=True)
class Piece:
    """``text`` as shown for source[start:end]; ``math``: a rendered span (else text is the source);
    ``code``: a fence or inline code."""

    start: int
    end: int
    text: str
    math: bool = False
    code: bool = False


# -- pylatexenc, extended ---------------------------------------------------------------------------

_SUP = dict(zip("0123456789+-=()ni", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ", strict=True))
_SUB = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))
_VULGAR = {
    "1/2": "½",
    "1/3": "⅓",
    "2/3": "⅔",
    "1/4": "¼",
    "3/4": "¾",
    "1/5": "⅕",
    "2/5": "⅖",
    "3/5": "⅗",
    "4/5": "⅘",
    "1/6": "⅙",
    "5/6": "⅚",
    "1/8": "⅛",
    "3/8": "⅜",
    "5/8": "⅝",
    "7/8": "⅞",
}
_ROOTS = {"": "√", "2": "√", "3": "∛", "4": "∜"}
_SIMPLE = re.compile(r"[\w.′√]+|[\w.√]*\(.*\)")  # needs no brackets around it as an operand (ours)


def _arg(node: Any, l2tobj: LatexNodes2Text, i: int) -> str:
    args = node.nodeargd.argnlist if node.nodeargd is not None else []
    arg = args[i] if i < len(args) else None
    return l2tobj.nodelist_to_text([arg]).strip() if arg is not None else ""


def _operand(s: str) -> str:
    return s if _SIMPLE.fullmatch(s) else f"({s})"


def _frac(node: Any, l2tobj: LatexNodes2Text) -> str:
    """½ where Unicode has the glyph, ⁵⁄₇ for other digits (Unicode's fraction slash), else a/b."""
    a, b = _arg(node, l2tobj, 0), _arg(node, l2tobj, 1)
    if f"{a}/{b}" in _VULGAR:
        return _VULGAR[f"{a}/{b}"]
    if a.isdigit() and b.isdigit():
        return "".join(_SUP[c] for c in a) + "⁄" + "".join(_SUB[c] for c in b)
    return f"{_operand(a)}/{_operand(b)}"


def _sqrt(node: Any, l2tobj: LatexNodes2Text) -> str:
    index, body = _arg(node, l2tobj, 0), _arg(node, l2tobj, 1)
    sign = _ROOTS.get(index) or "".join(_SUP.get(c, c) for c in index) + "√"
    return sign + (body if body.isalnum() else f"({body})")


def _script(table: dict[str, str], mark: str) -> Any:
    """x^{10} as x¹⁰ when every character has a super/subscript form, else x^(n·k)."""

    def text(node: Any, l2tobj: LatexNodes2Text) -> str:
        s = _arg(node, l2tobj, 0)
        if s == "∘":  # 90^\circ
            return "°"
        if s and all(c in table for c in s):
            return "".join(table[c] for c in s)
        return mark + (s if len(s) == 1 else f"({s})")

    return text


def _boxed(node: Any, l2tobj: LatexNodes2Text) -> str:
    return f"{BOX[0]}{_arg(node, l2tobj, 0)}{BOX[1]}"


def _binom(node: Any, l2tobj: LatexNodes2Text) -> str:
    return f"C({_arg(node, l2tobj, 0)}, {_arg(node, l2tobj, 1)})"


def _pmod(node: Any, l2tobj: LatexNodes2Text) -> str:
    return f" (mod {_arg(node, l2tobj, 0)})"


# Macros without arguments that pylatexenc's tables lack, as they read (ours): sizing and spacing
# read as nothing or a space, a few symbols and operator names.
_SAME = {
    **dict.fromkeys(
        (
            "left",
            "right",
            "big",
            "Big",
            "bigg",
            "Bigg",
            "bigl",
            "bigr",
            "Bigl",
            "Bigr",
            "middle",
            "displaystyle",
            "textstyle",
            "limits",
            "nolimits",
        ),
        "",
    ),
    **dict.fromkeys((",", ":", ";", " ", "quad", "qquad", "enspace", "thinspace"), " "),
    "!": "",
    "ne": "≠",
    "iff": " ⟺ ",
    "implies": " ⟹ ",
    "degree": "°",
    "triangle": "△",
    "neg": "¬",
    "lnot": "¬",
    "land": "∧",
    "lor": "∨",
    "gcd": "gcd",
    "lcm": "lcm",
    "deg": "deg",
    "det": "det",
    "arcsin": "arcsin",
    "arccos": "arccos",
    "arctan": "arctan",
    "cot": "cot",
    "sec": "sec",
    "csc": "csc",
    "exp": "exp",
}


def _contexts() -> tuple[Any, Any]:
    """The parser's and the converter's tables: pylatexenc's defaults with the macros math models use."""
    scripts = MacroStandardArgsParser("{")
    parse = _parse_db()
    parse.add_context_category(
        "tuiagent-math",
        prepend=True,
        macros=[
            *(std_macro(name, False, 2) for name in ("frac", "dfrac", "tfrac", "cfrac", "binom", "dbinom", "tbinom")),
            std_macro("sqrt", True, 1),
            std_macro("boxed", False, 1),
            std_macro("pmod", False, 1),
            std_macro("mod", False, 0),
            std_macro("bmod", False, 0),
            std_macro("operatorname", False, 1),
            *(std_macro(name, False, 0) for name in _SAME),
        ],
        specials=[SpecialsSpec("^", args_parser=scripts), SpecialsSpec("_", args_parser=scripts)],
    )
    text = _text_db()
    text.add_context_category(
        "tuiagent-math",
        prepend=True,
        macros=[
            *(MacroTextSpec(name, _frac) for name in ("frac", "dfrac", "tfrac", "cfrac")),
            *(MacroTextSpec(name, _binom) for name in ("binom", "dbinom", "tbinom")),
            MacroTextSpec("sqrt", _sqrt),
            MacroTextSpec("boxed", _boxed),
            MacroTextSpec("pmod", _pmod),
            MacroTextSpec("mod", " mod "),
            MacroTextSpec("bmod", " mod "),
            MacroTextSpec("operatorname", "%s"),
            *(MacroTextSpec(name, shown) for name, shown in _SAME.items()),
        ],
        specials=[SpecialsTextSpec("^", _script(_SUP, "^")), SpecialsTextSpec("_", _script(_SUB, "_"))],
    )
    return parse, text


_PARSE_DB, _TEXT_DB = _contexts()


class _ToText(LatexNodes2Text):  # type: ignore[misc]  # pylatexenc has no type information
    """pylatexenc's converter, keeping the space written after a symbol macro before another macro
    (``\\pm \\sqrt{2}`` reads ``± √2``, not ``±√2``); doubled spaces are folded afterwards."""

    def node_to_text(self, node: Any, prev_node_hint: Any = None, textcol: int = 0) -> str:
        text: str = super().node_to_text(node, prev_node_hint, textcol)
        bare = isinstance(node, LatexMacroNode) and not (node.nodeargd and node.nodeargd.argnlist)
        return text + " " if bare and node.macro_post_space and text else text


# Spaces between two constructs (x^2 \ne 1) kept as written: pylatexenc drops them by default.
_TO_TEXT = _ToText(latex_context=_TEXT_DB, math_mode="text", strict_latex_spaces={"between-latex-constructs": True})


def _known(nodes: Any) -> bool:
    """Every macro in ``nodes`` has a text form (pylatexenc drops an unknown one silently)."""
    for node in nodes or ():
        if isinstance(node, LatexMacroNode) and _TEXT_DB.get_macro_spec(node.macroname) is None:
            return False
        children = list(getattr(node, "nodelist", None) or ())
        if isinstance(node, (LatexMacroNode, LatexSpecialsNode, LatexEnvironmentNode)) and node.nodeargd is not None:
            children += [a for a in node.nodeargd.argnlist if a is not None]
        if isinstance(
            node, (LatexGroupNode, LatexMathNode, LatexEnvironmentNode, LatexMacroNode, LatexSpecialsNode)
        ) and not _known(children):
            return False
    return True


@lru_cache(maxsize=4096)
def _convert(source: str) -> str | None:
    """``source`` (math-mode LaTeX) as Unicode text, or None when pylatexenc cannot parse it or does
    not know one of its macros. A newline in it is a space, as in LaTeX; ``\\\\`` breaks a line."""
    flat = source.replace("\n", " ")
    try:
        nodes = LatexWalker(f"\\({flat}\\)", latex_context=_PARSE_DB, tolerant_parsing=False).get_latex_nodes()[0]
        if not _known(nodes):
            return None
        text = _TO_TEXT.nodelist_to_text(nodes)
    except (LatexWalkerError, ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError):
        return None
    lines = [re.sub(r"\s{2,}", " ", line).strip() for line in text.strip().splitlines()]
    shown = "\n".join(line for line in lines if line)
    return shown if shown or not source.strip() else None


def render_latex(source: str) -> str:
    """The math-mode LaTeX ``source`` (no delimiters: ``3 \\times 17``, an answer's ``\\frac{1}{2}``)
    as Unicode text, or ``source`` itself when it cannot be read."""
    shown = _convert(source)
    return source if shown is None else shown


# -- finding the math -------------------------------------------------------------------------------

# Code is never rendered: a fence (``` to the next ``` or the end, as tuiagent.ui's turn view reads
# it) or inline backticks on one line.
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
# What opens a math span; \$ is a dollar sign, not math.
_OPEN = re.compile(r"(?<!\\)(\$\$|\$|\\\[|\\\(|\\boxed\s*\{)")
_CLOSE = {"$$": "$$", "\\[": "\\]", "\\(": "\\)"}


def _dollar_end(par: str, start: int) -> int | None:
    """Where a ``$`` span opened at ``start`` ends (past its closing ``$``), or None. Pandoc's rule
    (its manual, extension tex_math_dollars): the opening ``$`` has a non-space right after it, the
    closing one a non-space right before it and no digit right after it; ours: no ``$`` or newline
    inside, so "$5 and $10" is money."""
    if start + 1 >= len(par) or par[start + 1].isspace():
        return None
    close = par.find("$", start + 1)
    if close < 0 or "\n" in par[start + 1 : close] or par[close - 1].isspace() or par[close - 1] == "\\":
        return None
    if close + 1 < len(par) and par[close + 1].isdigit():
        return None
    return close + 1


def _brace_pairs(text: str) -> dict[int, int]:
    """Each ``{`` of ``text`` that closes -> its ``}`` (escaped braces skipped), in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


class _Scan:
    """What one pass over a text's math openers has learnt of its closers, so a paragraph of
    openers that never close is read in linear time."""

    def __init__(self, text: str):
        self.text = text
        self.unclosed: set[str] = set()  # openers with no closer after the last one tried
        self._braces: dict[int, int] | None = None

    def brace_end(self, open_at: int) -> int | None:
        """Past the ``}`` that closes the ``{`` at ``open_at``, or None."""
        if self._braces is None:
            self._braces = _brace_pairs(self.text)
        end = self._braces.get(open_at)
        return None if end is None else end + 1

    def span(self, m: re.Match[str]) -> tuple[int, str | None] | None:
        """(end, shown) of the math span that ``m`` opens (shown None: it cannot be read), or None
        when it does not close."""
        par, opener = self.text, m.group(1)
        if opener == "$":
            end = _dollar_end(par, m.start())
            return None if end is None else (end, _convert(par[m.start() + 1 : end - 1]))
        if opener.startswith("\\boxed"):
            end = self.brace_end(m.end() - 1)
            return None if end is None else (end, _convert(par[m.start() : end]))
        close = par.find(_CLOSE[opener], m.end()) if opener not in self.unclosed else -1
        if close < 0:
            self.unclosed.add(opener)  # no later one closes either
            return None
        if not par[m.end() : close].strip():
            return None
        return close + len(_CLOSE[opener]), _convert(par[m.end() : close])


@lru_cache(maxsize=4096)
def _paragraph(par: str) -> tuple[Piece, ...]:
    """The pieces of one paragraph of prose, offsets from its start (cached: a streaming turn asks
    again for every paragraph but its last)."""
    out: list[Piece] = []
    pos, scan = 0, _Scan(par)
    for m in _OPEN.finditer(par):
        if m.start() < pos:
            continue
        found = scan.span(m)
        if found is None:
            continue
        end, shown = found
        if shown is None:  # shown as written
            continue
        if m.start() > pos:
            out.append(Piece(pos, m.start(), par[pos : m.start()]))
        out.append(Piece(m.start(), end, shown, math=True))
        pos = end
    if pos < len(par):
        out.append(Piece(pos, len(par), par[pos:]))
    return tuple(out)


def pieces(text: str) -> list[Piece]:
    """``text`` cut into pieces whose shown texts, joined, are its rendering (:func:`render_math`)."""
    out: list[Piece] = []
    pos = 0
    for m in [*_CODE.finditer(text), None]:
        prose_end = m.start() if m is not None else len(text)
        if prose_end > pos:
            out += _prose(text, pos, prose_end)
        if m is not None:
            out.append(Piece(m.start(), m.end(), m.group(), code=True))
            pos = m.end()
    return out


def _prose(text: str, start: int, end: int) -> list[Piece]:
    out: list[Piece] = []
    pos = start
    for m in [*_PARAGRAPH.finditer(text, start, end), None]:
        par_end = m.start() if m is not None else end
        if par_end > pos:
            out += [Piece(p.start + pos, p.end + pos, p.text, p.math) for p in _paragraph(text[pos:par_end])]
        if m is not None:
            out.append(Piece(m.start(), m.end(), m.group()))
            pos = m.end()
    return out


def render_math(text: str) -> str:
    """``text`` with its math rendered; code, plain prose and what pylatexenc cannot read as they are."""
    return "".join(p.text for p in pieces(text))


def rendered_spans(parts: list[Piece]) -> list[tuple[int, int, Piece]]:
    """Where each rendered formula of ``parts`` sits in the rendered text: (start, end, its piece)."""
    out, at = [], 0
    for p in parts:
        if p.math:
            out.append((at, at + len(p.text), p))
        at += len(p.text)
    return out


def shown_between(parts: list[Piece], start: int, end: int) -> str:
    """What source[start:end] shows as, for bounds that fall on no math piece's inside."""
    out = []
    for p in parts:
        if p.end <= start or p.start >= end:
            continue
        if p.math:
            out.append(p.text)
        else:
            out.append(p.text[max(start, p.start) - p.start : min(end, p.end) - p.start])
    return "".join(out)


class MathStream:
    """A turn's text as it streams, rendered a line at a time (the CLI's transcript): ``feed`` gives
    back what can be shown now; a line whose math may still close later is held until it does or
    its paragraph ends; ``end`` gives the rest. ``render=False``: the text as it comes."""

    def __init__(self, render: bool = True):
        self.render = render
        self._text = ""
        self._shown = 0  # source offset shown so far

    def feed(self, piece: str) -> str:
        if not self.render:
            return piece
        self._text += piece
        cut = self._text.rfind("\n") + 1
        if cut <= self._shown:
            return ""
        parts = pieces(self._text)
        if any(p.math and p.start < cut < p.end for p in parts) or self._open_math(parts, cut):
            return ""
        return self._take(parts, cut)

    def end(self) -> str:
        """The rest of the turn, shown; the stream starts empty again."""
        if not self.render:
            return ""
        rest = self._take(pieces(self._text), len(self._text))
        self._text, self._shown = "", 0
        return rest

    def _take(self, parts: list[Piece], cut: int) -> str:
        shown = shown_between(parts, self._shown, cut)
        self._shown = cut
        return shown

    def _open_math(self, parts: list[Piece], cut: int) -> bool:
        """A span opened in the current paragraph, outside code, that has not closed by ``cut``
        (a ``$`` span closes on its line, so a whole line settles it)."""
        lo = max(max((m.end() for m in _PARAGRAPH.finditer(self._text, 0, cut)), default=0), self._shown)
        scan = _Scan(self._text)
        for p in parts:
            if p.math or p.code or p.end <= lo or p.start >= cut:
                continue
            for m in _OPEN.finditer(self._text, max(p.start, lo), min(p.end, cut)):
                if m.group(1) != "$" and scan.span(m) is None:
                    return True
        return False
