"""Token confidence drawn in place: each generated token's recorded probability
(:mod:`tuiagent.export.confidence`) as a background shade over the text and code it wrote, and as the
value a mouse pointer over it reads."""

from __future__ import annotations

from textual.content import Content, Span
from textual.events import MouseEvent
from textual.style import Style

from tuiagent.export.confidence import BAND_LIMITS, TokenSpans, band

# The background of each band, least sure first (BAND_LIMITS).
BANDS: tuple[tuple[float, str], ...] = tuple(
    zip(BAND_LIMITS, ("on $error 55%", "on $warning 50%", "on $warning 20%"), strict=True)
)


def shade(content: Content, tokens: TokenSpans) -> Content:
    """``content`` with its tokens (offsets into its text) shaded by band. Every shaded token carries
    its probability as style meta (read on hover); neighbouring tokens in one band share one shading
    span."""
    spans: list[Span] = []
    size = len(content.plain)
    run_band, run_start, run_end = None, 0, 0
    for start, end, p in zip(tokens.starts, tokens.ends, tokens.probs, strict=True):
        start, end = max(start, 0), min(end, size)
        if end <= start:
            continue
        b = None if p is None else band(p)
        if (
            b is not None and p is not None
        ):  # a shaded token reads its p on hover (certain ones share no meta: fewer segments)
            spans.append(Span(start, end, Style.from_meta({"p": round(p, 4)})))
        if b != run_band or start != run_end:
            if run_band is not None:
                spans.append(Span(run_start, run_end, BANDS[run_band][1]))
            run_band, run_start = b, start
        run_end = end
    if run_band is not None:
        spans.append(Span(run_start, run_end, BANDS[run_band][1]))
    return Content(content.plain, [*content.spans, *spans]) if spans else content


def formulas(content: Content, starts_ends: list[tuple[int, int]]) -> Content:
    """``content`` with each rendered formula (its start and end) marked, so its hover says the p it
    is shaded by is its least sure token's."""
    return Content(
        content.plain, [*content.spans, *(Span(a, b, Style.from_meta({"formula": True})) for a, b in starts_ends)]
    )


def hovered(event: MouseEvent, otherwise: str) -> str:
    """What the pointer over a shaded text reads: the probability of the token under it, else ``otherwise``."""
    p = event.style.meta.get("p")
    if p is None:
        return otherwise
    return f"least sure token of this formula: p = {p:.4f}" if event.style.meta.get("formula") else f"token p = {p:.4f}"
