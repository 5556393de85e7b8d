"""Token confidence in place (f8): text and code shaded by each token's recorded probability, the
value read on hover, live and in replay."""

from __future__ import annotations

import math

from textual.content import Content

from tuiagent.core.run_spec import RunSpec
from tuiagent.export.confidence import TokenSpans, band
from tuiagent.ui.token_shade import BANDS, shade
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.turn_text import TurnText


def test_bands_and_windows():
    assert band(0.1) == 0 and band(0.5) == 1 and band(0.8) == 2 and band(0.95) is None
    spans = TokenSpans()
    for text, p in [("ab", 0.99), ("cd", 0.2), ("ef", 0.5)]:
        spans.append(text, math.log(p))
    window = spans.window(3, 6)  # "d" (half of "cd") and "ef"
    assert window.starts == [0, 1] and window.ends == [1, 3]
    assert [round(p, 3) for p in window.probs] == [0.2, 0.5]
    assert spans.lowest("abcdef") == ("cd", spans.probs[1])


def test_shade_merges_a_band_and_keeps_each_value():
    spans = TokenSpans()
    for text, p in [("a", 0.1), ("b", 0.2), ("c", 0.99), ("d", 0.5)]:
        spans.append(text, math.log(p))
    shaded = shade(Content("abcd"), spans)
    styles = [(s.start, s.end, s.style) for s in shaded.spans if isinstance(s.style, str)]
    assert styles == [(0, 2, BANDS[0][1]), (3, 4, BANDS[1][1])]
    metas = [s.style.meta["p"] for s in shaded.spans if not isinstance(s.style, str)]
    assert metas == [0.1, 0.2, 0.5]  # a certain token (0.99) is not shaded and carries no value


UNSURE = [
    {"text": "I think the answer is ", "logprob": -0.01},
    {"text": "42", "logprob": -1.6},
    {"text": ".\n```python\nprint(", "logprob": -0.01},
    {"text": "6*7", "logprob": -0.9},
    {"text": ")\n```\n```output\n", "logprob": -0.01},
]


def turns():
    from tuiagent.backends.scripted import split_tokens
    from tuiagent.protocol import Token

    first = [Token(t["text"], t["logprob"]) for t in UNSURE]
    return [first, split_tokens("So \\boxed{42}.", -0.01)]


async def test_live_shading_and_hover(ui):
    from tuiagent.backends.scripted import ScriptedBackend
    from tuiagent.ui import AppConfig, make_app

    app = make_app(
        AppConfig(model="scripted", problem="6*7?", run_spec=RunSpec(guards=())),
        backend_factory=lambda: ScriptedBackend(turns(), delay_s=0.001),
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f8")
        await ui.solve(pilot, app)
        text = app.screen.query(TurnText).first()
        shaded = [s for s in text.render().spans if s.style == BANDS[0][1]]  # 42 (p 0.20)
        assert shaded and text.render().plain[shaded[0].start : shaded[0].end] == "42"
        code = app.screen.query_one(CodeBlockView)
        assert "least sure: '6*7' p 0.407" in ui.text(code)
        line = next(i for i, s in enumerate(code.render().plain.splitlines()) if "print(6*7)" in s)
        col = code.render().plain.splitlines()[line].index("6*7")
        await pilot.hover(code, offset=(col + 2, line))  # the left border and padding: 2 cells
        await ui.wait_for(
            pilot, lambda: code.tooltip == "token p = 0.4066", 5, f"the token's p on hover: {code.tooltip}"
        )
        await pilot.press("f8")
        assert not text.shaded and "least sure" not in ui.text(code)


async def test_replay_shades_from_the_recorded_tokens(ui, tmp_path):
    from tuiagent.ui import AppConfig, make_app

    app = make_app(AppConfig(model="scripted", screen="replay", replay=ui.DATA / "guarded.jsonl"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.wait_for(pilot, lambda: app.screen.events != [], 10, "the run to load")
        await pilot.press("f8", "end")
        texts = list(app.screen.query(TurnText))
        assert texts and all(t.shaded for t in texts)
        assert any(t.tokens.probs for t in texts)
