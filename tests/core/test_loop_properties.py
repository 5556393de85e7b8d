"""Property tests for the agent loop: whatever the model writes (fences unclosed, nested or split
across tokens, answers malformed or missing, enormous turns) and whatever the kernel does, a run
never raises, ends with one recorded RunFinished that carries a reason, and its trajectory loads
back as the same events."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.loop import Agent
from tuiagent.core.trajectory import Recorder, load
from tuiagent.parsing import OUTPUT_FENCE, final_answer
from tuiagent.protocol import RunSettings, Sampling, Token

REASONS = {"answer", "no_answer", "tool_budget", "token_budget", "turn_length", "time_budget", "cancelled", "error"}
FRAGMENTS = [
    "```python\n",
    "```python",
    "```\n",
    "```",
    "\n",
    "`",
    OUTPUT_FENCE,
    "\\boxed{",
    "}",
    "{",
    "\\boxed{}",
    "\\boxed{\\frac{1}{2}}",
    "\\boxed{\\boxed{3}}",
    "print(6 * 7)",
    " ",
    "é",
    "😀",
    "\u2028",
    "\x85",
    "\r\n",
]
CODE = st.text(max_size=12)
TOOL_CALL = CODE.map(lambda c: f"```python\n{c}\n```\n{OUTPUT_FENCE}\n42\n```\n")  # the model made up an output
ANSWER = st.text("0123456789{}x", max_size=6).map(lambda a: f"So \\boxed{{{a}}}.")  # braces balanced or not
# What a turn is made of: closed blocks (with or without the output fence after them), unclosed
# and nested fences, answers, and noise; it ends asking for the tool, answering, or neither.
PARTS = st.one_of(
    TOOL_CALL,
    CODE.map(lambda c: f"Let me check.\n```python\n{c}\n```\n"),
    CODE.map(lambda c: f"```python\n{c}"),
    CODE.map(lambda c: f"```python\n```python\n{c}\n```\n```\n"),
    ANSWER,
    st.sampled_from(FRAGMENTS),
    st.text(max_size=6),
)
TURN_TEXT = st.builds(
    lambda parts, end: "".join(parts) + end, st.lists(PARTS, max_size=4), TOOL_CALL | ANSWER | st.just("")
)


class ChaosKernel:
    """Test double for a kernel: answers call i with outcome i (output, error, timeout, or raising),
    then with plain output."""

    def __init__(self, outcomes: list[tuple[str, str]]):
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    async def execute(self, code: str, timeout: float) -> CellResult:
        await asyncio.sleep(0)  # a real kernel is awaited: a cancel can land here
        self.calls.append(code)
        kind, text = self.outcomes.pop(0) if self.outcomes else ("ok", "ok")
        if kind == "raise":
            raise RuntimeError(text)
        if kind == "timeout":
            return CellResult(outputs=(Output("stdout", text),), error=True, timed_out=True)
        if kind == "error":
            return CellResult(outputs=(Output("error", text),), error=True, error_name="ValueError")
        return CellResult(outputs=(Output("stdout", text),))


class BrokenBackend(ScriptedBackend):
    """Test double for a model server that goes away after ``fail_after`` tokens (None: never)."""

    def __init__(self, turns: list[list[Token]], fail_after: int | None):
        super().__init__(turns)
        self.fail_after = fail_after
        self.sent = 0

    async def generate(self, out, prompt, sampling, stop):
        async for token in super().generate(out, prompt, sampling, stop):
            if self.sent == self.fail_after:
                raise ConnectionError("the model server went away")
            self.sent += 1
            yield token


@st.composite
def turns(draw) -> list[list[Token]]:
    """Model turns, each cut into tokens at arbitrary points (a fence or answer may straddle tokens)."""
    out = []
    for text in draw(st.lists(TURN_TEXT, max_size=6)):
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
        bounds = [0, *cuts, len(text)]
        lps = st.none() | st.floats(-20, 0)
        out.append([Token(text[a:b], draw(lps)) for a, b in zip(bounds, bounds[1:])])
    return out


# A problem from the command line may hold undecodable bytes, as surrogateescape's U+DC80..U+DCFF.
ESCAPED_BYTE = st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF, categories=["Cs"])
PROBLEM = st.lists(st.text(max_size=5) | ESCAPED_BYTE, max_size=6).map("".join)
OUTCOMES = st.lists(st.tuples(st.sampled_from(["ok", "error", "timeout", "raise"]), st.text(max_size=50)), max_size=5)
SETTINGS = st.builds(
    RunSettings,
    mode=st.sampled_from(["tool", "cot"]),
    max_tool_calls=st.integers(0, 3),
    output_chars=st.integers(0, 60),
    max_tokens=st.integers(1, 200),
    max_wall_s=st.integers(0, 3).map(lambda i: 0.0 if i == 3 else 600.0),
)  # now and then: no time at all


async def run(agent: Agent, problem: str, stop_after: int | None) -> list[ev.Event]:
    """The run's events as a consumer sees them; ``stop_after`` events in, the consumer is cancelled."""
    seen: list[ev.Event] = []

    async def consume() -> None:
        async for event in agent.stream(problem):
            seen.append(event)
            if len(seen) == stop_after:
                asyncio.current_task().cancel()

    try:
        await asyncio.create_task(consume())
    except asyncio.CancelledError:
        pass
    return seen


def check_run(
    path: Path, seen: list[ev.Event], settings: RunSettings, kernel: ChaosKernel | None, backend: ScriptedBackend
) -> ev.RunFinished:
    """The properties every run has, however it went; returns its RunFinished."""
    loaded = load(path)
    assert loaded.warnings == []
    events = loaded.events
    assert events[: len(seen)] == seen  # the consumer saw the recorded events, in order
    finishes = [e for e in events if isinstance(e, ev.RunFinished)]
    assert len(finishes) == 1 and events[-1] is finishes[0]
    fin = finishes[0]
    assert fin.reason in REASONS
    ended = [e for e in events if isinstance(e, ev.TurnEnded)]
    deltas = [e for e in events if isinstance(e, ev.TokenDelta)]
    counted = [d for d in deltas if d.turn in {e.turn for e in ended}]  # a backend failure leaves a turn open
    assert fin.reason == "error" or counted == deltas
    assert fin.generated_tokens == len(counted) == sum(e.tokens for e in ended) <= settings.max_tokens
    for turn in ended:
        assert turn.text == "".join(d.text for d in deltas if d.turn == turn.turn)
        assert settings.mode == "cot" or OUTPUT_FENCE not in turn.text  # generation stops at the output fence
    if fin.reason == "answer":
        assert fin.answer == final_answer(ended[-1].text) is not None
    if fin.reason == "no_answer":
        assert fin.answer is None
    if fin.reason == "error":
        assert any(isinstance(e, ev.Notice) and e.level == "error" for e in events)
    executed = [e for e in events if isinstance(e, ev.ToolResult) and e.executed]
    assert fin.tool_calls == len(executed) <= settings.max_tool_calls
    codes = {e.call: e.code for e in events if isinstance(e, ev.CodeBlock)}
    if kernel is not None:
        assert kernel.calls[: len(executed)] == [codes[e.call] for e in executed]
    # The replay fold rebuilds exactly the context the model was given at each turn.
    starts = [i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)]
    assert [working_context(events[:i]).text for i in starts] == backend.prompts[: len(starts)]
    return fin


@settings(max_examples=100, deadline=None)
@given(
    turns(),
    OUTCOMES,
    SETTINGS,
    st.integers(1, 40),
    PROBLEM,
    st.none() | st.integers(1, 60),
    st.none() | st.integers(0, 30),
)
def test_any_model_output_ends_in_one_recorded_finish(
    script, outcomes, run_settings, max_turn_tokens, problem, stop_after, fail_after
):
    backend = BrokenBackend(script, fail_after)
    kernel = ChaosKernel(outcomes) if run_settings.mode == "tool" else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        with Recorder(path) as rec:
            agent = Agent(
                backend, kernel, settings=run_settings, recorder=rec, sampling=Sampling(max_tokens=max_turn_tokens)
            )
            seen = asyncio.run(run(agent, problem, stop_after))
        fin = check_run(path, seen, run_settings, kernel, backend)
    if stop_after is None:
        assert seen[-1] == fin and fin.reason != "cancelled"


MEGABYTE = 1_000_000


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "turn, reason",
    [
        # one token of a megabyte: fences that never close, answers that never close, then one that does
        (["```python\n" * (MEGABYTE // 10)], "no_answer"),
        (["\\boxed{" * (MEGABYTE // 7) + "\\boxed{7}"], "answer"),
        # a megabyte in small tokens: the turn's own length limit (max_tokens per turn) ends it
        (["word "] * (MEGABYTE // 5), "turn_length"),
    ],
)
def test_enormous_turns_end_with_a_reason(tmp_path, turn, reason):
    backend, kernel = ScriptedBackend([[Token(t, -0.1) for t in turn]]), ChaosKernel([])
    path = tmp_path / "big.jsonl"
    with Recorder(path) as rec:
        seen = asyncio.run(run(Agent(backend, kernel, recorder=rec), "p", None))
    assert check_run(path, seen, RunSettings(), kernel, backend).reason == reason


@pytest.mark.timeout(60)
def test_an_enormous_tool_output_is_cut_for_the_model_and_kept_whole_in_the_trajectory(tmp_path):
    code_turn = [Token("```python\nprint('x' * 10**6)\n```\n"), Token(OUTPUT_FENCE)]
    backend = ScriptedBackend([code_turn, [Token("\\boxed{1}")]])
    kernel = ChaosKernel([("ok", "x" * MEGABYTE)])
    path = tmp_path / "big.jsonl"
    with Recorder(path) as rec:
        seen = asyncio.run(run(Agent(backend, kernel, recorder=rec), "p", None))
    assert check_run(path, seen, RunSettings(), kernel, backend).reason == "answer"
    result = next(e for e in seen if isinstance(e, ev.ToolResult))
    assert len(result.shown) < 500 and result.outputs[0]["text"] == "x" * MEGABYTE
