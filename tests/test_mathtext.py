"""Math rendered for reading (tuiagent.mathtext): what each delimiter reads as, money left alone, code
never touched, a fallback to the source, and a stream that reads the same however it is cut."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuiagent.mathtext import BOX, MathStream, pieces, render_latex, render_math


@pytest.mark.parametrize(
    "source, shown",
    [
        # the issue's own examples
        (r"the initial number of marbles is \(3 \times 17\)", "the initial number of marbles is 3 × 17"),
        (r"\((3 \times 17 - 9) + 4 \times 6\)", "(3 × 17 - 9) + 4 × 6"),
        ("so\n\\[ 288 - 150 = 138 \\]\nleft", "so\n288 - 150 = 138\nleft"),
        # display math over lines, $$ and $
        ("\\[\n288 - 150\n= 138\n\\]", "288 - 150 = 138"),
        (r"hence $$\frac{a+b}{c}$$ holds", "hence (a+b)/c holds"),
        (r"let $x^2 + y_{10} = \frac{1}{2}$ now", "let x² + y₁₀ = ½ now"),
        (r"$x^{n+1}$, $x^{a b}$", "xⁿ⁺¹, x^(a b)"),
        (r"\(3\frac{5}{7}\) and \(\dfrac{x}{y+1}\)", "3⁵⁄₇ and x/(y+1)"),
        (r"\(\sqrt{2}\), \(\sqrt[3]{x+1}\), \(90^\circ\)", "√2, ∛(x+1), 90°"),
        (r"\(a \equiv b \pmod{7}\), \(\binom{5}{2} = 10\)", "a ≡ b (mod 7), C(5, 2) = 10"),
        (r"\(\left(\frac{3}{4}\right)^2 \ne 1\)", "(¾)² ≠ 1"),
        (r"\( x = \frac{-b \pm \sqrt{b^2 - 4ac}}{2a} \)", "x = (-b ± √(b² - 4ac))/2a"),
        (r"\[ \text{Speed} = \frac{\text{Distance}}{\text{Time}} \]", "Speed = Distance/Time"),
        ("\\[\\begin{aligned} a &= b \\\\ c &= d \\end{aligned}\\]", "a = b\nc = d"),
    ],
)
def test_delimiters_render(source: str, shown: str) -> None:
    assert render_math(source) == shown


@pytest.mark.parametrize(
    "source, shown",
    [
        (r"The answer is \boxed{42}.", f"The answer is {BOX[0]}42{BOX[1]}."),
        (r"so \(\boxed{\frac{3}{4}}\)", f"so {BOX[0]}¾{BOX[1]}"),
        (r"\boxed{\{1, 2\}}", f"{BOX[0]}{{1, 2}}{BOX[1]}"),
    ],
)
def test_boxed_is_marked(source: str, shown: str) -> None:
    assert render_math(source) == shown


@pytest.mark.parametrize(
    "money",
    [
        "I paid $5 and $10 for it.",
        "between $5-$10, or $5/$10",
        "$5, $10 and $15",
        "$5+$10=$15",
        "it costs $5.",
        "the $20 bill and the $ 5 coin",
        r"escaped \$5 and \$x\$",
    ],
)
def test_money_is_not_math(money: str) -> None:
    assert render_math(money) == money


def test_money_beside_math() -> None:
    assert render_math("$5.00 each, so $x$ in total") == "$5.00 each, so x in total"


_AMOUNT = st.builds(
    lambda d, c: "$" + d + c,
    st.from_regex(r"[1-9][0-9]{0,4}", fullmatch=True),
    st.sampled_from(["", ".50", ",000", "k"]),
)
_BETWEEN = st.sampled_from([" and ", ", ", " to ", "-", "/", " + ", " or ", " then "])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_AMOUNT, min_size=1, max_size=6),
    st.lists(_BETWEEN, min_size=6, max_size=6),
    st.sampled_from(["", ".", " each.", " in total"]),
)
def test_any_list_of_prices_stays_money(amounts: list[str], between: list[str], end: str) -> None:
    text = "".join(a + b for a, b in zip(amounts, between))[: -len(between[len(amounts) - 1])] + end
    assert render_math(text) == text


@pytest.mark.parametrize(
    "source",
    [
        r"\(\foo{3}\) is not known",  # pylatexenc would drop the unknown macro
        r"\(\frac{1}{\) cannot be parsed",
        r"\(a \over b\)",
        r"an opener that never closes: \( x + 1",
        r"\boxed{42",
    ],
)
def test_what_cannot_be_read_stays_as_written(source: str) -> None:
    assert render_math(source) == source


def test_render_latex_falls_back_to_its_source() -> None:
    assert render_latex(r"\frac{1}{2}") == "½"
    assert render_latex(r"\undefinedmacro{2}") == r"\undefinedmacro{2}"
    assert render_latex("42") == "42"


@pytest.mark.parametrize(
    "code",
    [
        "```python\nprint('$a$ and \\(b\\)', r'\\boxed{1}')\n```",
        "```output\n$5 \\(x\\)\n```",
        "see `$x$` and `\\(y\\)` in the code",
        "```python\nx = '\\\\(still open'\n",  # a fence still streaming: code to the end
    ],
)
def test_code_is_never_rendered(code: str) -> None:
    assert render_math(code) == code
    assert render_math(f"\\(1 \\times 2\\)\n{code}") == f"1 × 2\n{code}"


_PLAIN = st.text(st.characters(blacklist_characters="\\$`", blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(_PLAIN)
def test_plain_text_is_unchanged(text: str) -> None:
    assert render_math(text) == text


@pytest.mark.parametrize(
    "source",
    [
        r"the initial number of marbles is \(3 \times 17\)",
        r"let $x^2 + y_1$",
        r"\boxed{\frac{1}{2}}",
        "\\[ 288 - 150 = 138 \\]",
        "I paid $5 and $10",
    ],
)
def test_rendering_twice_changes_nothing_more(source: str) -> None:
    once = render_math(source)
    assert render_math(once) == once


_PARTS = st.sampled_from(
    [
        "\\(",
        "\\)",
        "\\[",
        "\\]",
        "$",
        "$$",
        "x",
        "1",
        " ",
        "\n",
        "\n\n",
        "```",
        "`",
        "\\boxed{",
        "{",
        "}",
        "\\times ",
        "\\frac{1}{2}",
        "5",
        "\\foo",
        "^2",
        "python\n",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PARTS, max_size=40))
def test_pieces_tile_the_source(parts: list[str]) -> None:
    text = "".join(parts)
    cut = pieces(text)
    assert [p.start for p in cut[1:]] == [p.end for p in cut[:-1]]
    assert (cut[0].start, cut[-1].end) == (0, len(text)) if cut else text == ""
    for p in cut:
        assert p.math or p.text == text[p.start : p.end]


@settings(max_examples=400, deadline=None)
@given(st.lists(_PARTS, max_size=40), st.data())
def test_a_stream_reads_as_the_whole_text(parts: list[str], data: st.DataObject) -> None:
    """However the tokens cut the text, the streamed transcript shows what the whole text renders to."""
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    stream = MathStream()
    shown = "".join(stream.feed(text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)])) + stream.end()
    assert shown == render_math(text)


def test_a_stream_holds_a_formula_until_it_closes() -> None:
    stream = MathStream()
    assert stream.feed("so \\(3 \\times\n") == ""  # the formula is still open
    assert stream.feed("17\\) it is\nnext") == "so 3 × 17 it is\n"
    assert stream.end() == "next"


def test_a_raw_stream_passes_the_text_through() -> None:
    stream = MathStream(render=False)
    assert stream.feed("\\(3 \\times ") + stream.feed("17\\)\n") + stream.end() == "\\(3 \\times 17\\)\n"


@settings(max_examples=300, deadline=None)
@given(st.lists(_PARTS, max_size=30), st.data())
def test_token_confidence_lines_up_with_the_rendered_text(parts: list[str], data: st.DataObject) -> None:
    """Tokens over the source, mapped onto the rendering (TokenSpans.through): text shown as written
    keeps its tokens' characters; each rendered formula is one token, as sure as its least sure one."""
    import math

    from tuiagent.export.confidence import TokenSpans

    text = "".join(parts)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(len(text) - 1, 1)), max_size=15))))
    bounds = [b for b in [0, *cuts, len(text)] if b <= len(text)]
    source = TokenSpans()
    for a, b in zip(bounds, bounds[1:]):
        if b > a:
            source.append(text[a:b], math.log(data.draw(st.floats(0.01, 1.0))))
    cut = pieces(text)
    shown = "".join(p.text for p in cut)
    mapped = source.through(cut)
    assert mapped.starts == sorted(mapped.starts) and all(s < e for s, e in zip(mapped.starts, mapped.ends))
    assert all(e <= s for e, s in zip(mapped.ends, mapped.starts[1:]))  # no two overlap
    at = 0
    for p in cut:
        inside = [
            (s, e, q) for s, e, q in zip(mapped.starts, mapped.ends, mapped.probs) if at <= s and e <= at + len(p.text)
        ]
        if p.math:
            low = min(q for s, e, q in zip(source.starts, source.ends, source.probs) if s < p.end and e > p.start)
            assert inside == [(at, at + len(p.text), low)]
        else:
            assert "".join(shown[s:e] for s, e, _ in inside) == text[p.start : p.end]
        at += len(p.text)


@pytest.mark.parametrize("unit", ["a \\( b ", "x \\boxed{ ", "\\boxed{\\boxed{ ", "\\[ z "])
def test_a_paragraph_of_openers_that_never_close_reads_in_linear_time(unit: str) -> None:
    """20,000 of them take milliseconds; read quadratically they took minutes (3,000 \\boxed{ took 4.4 s)."""
    import time

    text = unit * 20_000
    start = time.perf_counter()
    assert render_math(text) == text
    assert time.perf_counter() - start < 10  # linear: ~0.02 s here; quadratic: minutes
