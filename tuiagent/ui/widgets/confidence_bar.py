"""A horizontal scale for a probability, with its threshold marked: ATTC confidence, G-STEP p(continue)."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar_content(
    value: float | None,
    threshold: float | None,
    *,
    width: int = 16,
    lo: float = 0.0,
    hi: float = 1.0,
    above: str = "$text-success",
    below: str = "$text-warning",
    log: bool = False,
) -> Content:
    """``▕█████▌   ┃  ▏``: the value as a bar over [lo, hi] (``log``: on a log10 scale, its ends written
    beside it: ``0.001▕██┃ ▏1 log``), the threshold as a marker.

    The bar is drawn in ``above`` when value >= threshold, else ``below``; None draws an empty
    scale. Values outside the scale are clamped (a ◂ or ▸ at the end says so).
    """
    if log:  # a log10 scale: small probabilities (G-STEP's tau is 0.05) get room
        import math

        def pos(v: float) -> float:
            return math.log10(max(v, 10**-9))

        bar = bar_content(
            None if value is None else pos(value),
            None if threshold is None else pos(threshold),
            width=width,
            lo=pos(lo),
            hi=pos(hi),
            above=above,
            below=below,
        )
        return Content.assemble((f"{lo:g}", "$text-muted"), bar, (f"{hi:g} log", "$text-muted"))  # a labelled scale
    cells = [" "] * width
    span = hi - lo
    style, fill = "$text-muted", ""
    if value is not None:
        x = min(max((value - lo) / span, 0.0), 1.0) * width
        full, part = int(x), int(round((x - int(x)) * 8))
        for i in range(min(full, width)):
            cells[i] = "█"
        if full < width and part:
            cells[full] = _EIGHTHS[part]
        if value < lo:
            cells[0] = "◂"
        style = above if threshold is None or value >= threshold else below
        fill = style.replace("$text-", "$")  # the same colour as a background, under the marker
    parts: list[Content] = [Content.styled("▕", "$text-muted")]
    mark = None
    if threshold is not None and lo <= threshold <= hi:
        mark = min(int((threshold - lo) / span * width), width - 1)
    for i, ch in enumerate(cells):
        if i == mark:
            covered = ch == "█"
            parts.append(Content.styled("┃", f"bold $background on {fill}" if covered else "bold $text-accent"))
        else:
            parts.append(Content.styled(ch, style if ch != " " else "$text-muted"))
    parts.append(Content.styled("▏", "$text-muted"))
    return Content.assemble(*parts)


class ConfidenceBar(Widget):
    """One line: a label, the bar, the number, the threshold and a decision."""

    DEFAULT_CSS = """
    ConfidenceBar { height: 1; width: 1fr; }
    """

    value: reactive[float | None] = reactive(None)
    threshold: reactive[float | None] = reactive(None)
    label: reactive[str] = reactive("")
    decision: reactive[str] = reactive("")

    def __init__(
        self,
        label: str = "",
        value: float | None = None,
        threshold: float | None = None,
        decision: str = "",
        *,
        lo: float = 0.0,
        hi: float = 1.0,
        id: str | None = None,
        classes: str | None = None,
    ):
        super().__init__(id=id, classes=classes)
        self.lo, self.hi = lo, hi
        self.set_reactive(ConfidenceBar.label, label)
        self.set_reactive(ConfidenceBar.value, value)
        self.set_reactive(ConfidenceBar.threshold, threshold)
        self.set_reactive(ConfidenceBar.decision, decision)

    def render(self) -> Content:
        number = "n/a" if self.value is None else f"{self.value:.3f}"
        tau = "" if self.threshold is None else f" τ {self.threshold:.3f}"
        return Content.assemble(
            (f"{self.label} ", "bold"),
            bar_content(self.value, self.threshold, lo=self.lo, hi=self.hi),
            (f" {number}", "bold"),
            (tau, "$text-muted"),
            (f"  {self.decision}" if self.decision else "", "bold"),
        )
