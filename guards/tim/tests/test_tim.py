"""TIM on scripted trajectories (canned kernel): the mitigation prompt, the graded monitor's rules,
its card. The paper's cases through the real kernel are in test_tim_golden.py."""

from __future__ import annotations

import pytest

from guards.chain import GuardChain
from guards.tim.guard import PROMPTS, TIM
from guards.tim.monitor import answer_matches_output, derivation_words, precursor_phrases, prose
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import FLAG, PASS, Display, Span, VerdictRecord

CODE = "I will compute it.\n```python\nprint(6 * 7)\n```\n```output\n"
SHORT_ANSWER = "So \\boxed{42}."
DERIVED_ANSWER = (
    "The algebra agrees with the code: 6 × 7 = 6 × 5 + 6 × 2 = 30 + 12 = 42, since six sevens "
    "split into six fives and six twos. Hence \\boxed{42}."
)


def out(text: str) -> CellResult:
    return CellResult(outputs=(Output("stdout", text),))


def card_text(d: Display) -> str:
    return "\n".join("".join(s.text for s in line if isinstance(s, Span)) for line in d.lines)


async def run(write_script, canned_kernel, *turns, results=(), configs=None):
    backend = ScriptedBackend(load_script(write_script(*turns)))
    chain = GuardChain(configs or {}, {"tim", *(configs or {})})
    events = [e async for e in Agent(backend, canned_kernel(list(results)), guards=chain).stream("What is 6 times 7?")]
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "tim"]
    return backend, events, verdicts


@pytest.mark.parametrize("wording", ["paper", "ours"])
async def test_prompt_injected_at_start(write_script, canned_kernel, wording):
    backend, events, verdicts = await run(
        write_script, canned_kernel, SHORT_ANSWER, configs={"tim": {"prompt": True, "wording": wording}}
    )
    assert backend.prompts[0].endswith(
        "What is 6 times 7?<|im_end|>\n<|im_start|>assistant\n" + PROMPTS[wording] + "\n"
    )
    assert verdicts[0].hook == "on_start" and verdicts[0].text == PROMPTS[wording]
    assert verdicts[0].data == {"prompt": True, "wording": wording}
    assert any(isinstance(e, ev.ContextAppended) and e.source == "tim" for e in events)


def test_the_default_wording_is_the_papers():
    assert TIM.Settings().wording == "paper"
    assert PROMPTS["paper"] == (
        "We should treat code snippets and their execution results only as helpful hints, "
        "and derive the solution through mathematical reasoning."
    )  # section 6.1


async def test_prompt_off_by_default(write_script, canned_kernel):
    backend, _, verdicts = await run(write_script, canned_kernel, SHORT_ANSWER)
    assert backend.prompts[0].endswith("<|im_start|>assistant\n")
    assert [v.hook for v in verdicts] == ["on_finish"]


async def test_a_run_without_a_call_scores_nothing(write_script, canned_kernel):
    _, _, (v,) = await run(write_script, canned_kernel, "Let's verify numerically: " + SHORT_ANSWER)
    assert v.action == PASS and (v.data["score"], v.data["tool_calls"]) == (0, 0)
    assert v.data["phrases"] == ["Let's verify numerically"]  # reported, yet no tool ran: no tool-induced myopia


async def test_derivation_after_the_output_is_clean(write_script, canned_kernel):
    _, _, (v,) = await run(write_script, canned_kernel, CODE, DERIVED_ANSWER, results=[out("42\n")])
    assert v.hook == "on_finish" and v.action == PASS
    assert v.data == {
        "flagged": False,
        "score": 0,
        "level": "none",
        "indicators": [],
        "precursors": [],
        "categories": [],
        "phrases": [],
        "tool_calls": 1,
        "computation_call": 1,
        "answer_call": 1,
        "words_before": 0,
        "words_after": 25,
        "derived": "after",
    }


async def test_answer_read_off_the_tool_is_flagged(write_script, canned_kernel):
    _, _, (v,) = await run(
        write_script, canned_kernel, CODE, CODE, SHORT_ANSWER, results=[out("6\n"), out("result: 42\n")]
    )
    assert v.action == FLAG and v.data["flagged"] and (v.data["score"], v.data["level"]) == (2, "moderate")
    assert v.data["indicators"] == ["no derivation", "answer read off the tool"]
    assert (v.data["tool_calls"], v.data["answer_call"], v.data["words_before"], v.data["words_after"]) == (2, 2, 0, 0)
    assert v.reason == (
        "moderate (2/3): no derivation: 0 words before call 2's output, 0 after; "
        "answer read off call 2's output (2 calls)"
    )


async def test_read_off_needs_min_calls_and_no_derivation(write_script, canned_kernel):
    # [paper] section 2 sets no call count: one call that computes the answer, read off with no
    # derivation, is both indicators (min_calls = 1); min_calls = 2 is the earlier reading of ours
    _, _, (one_call,) = await run(write_script, canned_kernel, CODE, SHORT_ANSWER, results=[out("42\n")])
    assert one_call.action == FLAG and one_call.data["answer_call"] == 1
    assert one_call.data["indicators"] == ["no derivation", "answer read off the tool"]
    _, _, (two_needed,) = await run(
        write_script, canned_kernel, CODE, SHORT_ANSWER, results=[out("42\n")], configs={"tim": {"min_calls": 2}}
    )
    assert two_needed.action == PASS and two_needed.data["indicators"] == ["no derivation"]
    _, _, (derived,) = await run(
        write_script, canned_kernel, CODE, CODE, DERIVED_ANSWER, results=[out("6\n"), out("42\n")]
    )
    assert derived.action == PASS and derived.data["answer_call"] == 2 and derived.data["indicators"] == []
    _, _, (relaxed,) = await run(
        write_script,
        canned_kernel,
        CODE,
        CODE,
        DERIVED_ANSWER,
        results=[out("6\n"), out("42\n")],
        configs={"tim": {"min_words_after": 50}},
    )
    assert relaxed.action == FLAG and relaxed.data["derived"] == "none"


async def test_precursor_phrases_alone_do_not_flag(write_script, canned_kernel):
    """The paper's phrases are "indicators rather than definitive proof": with a derivation they
    are one indicator of three, below flag_at; at flag_at = 1 they flag."""
    turn = "Let's verify this numerically with code.\n```python\nprint(6 * 7)\n```\n```output\n"
    _, _, (v,) = await run(write_script, canned_kernel, turn, DERIVED_ANSWER, results=[out("42\n")])
    assert v.action == PASS and v.data["indicators"] == ["precursor phrases"] and v.data["level"] == "weak"
    assert v.data["categories"] == ["numerical/empirical checking", "verification via code"]
    assert v.data["precursors"] == [
        {
            "category": "numerical/empirical checking",
            "phrase": "Let's verify this numerically",
            "turn": 1,
            "after_call": 0,
        },
        {
            "category": "verification via code",
            "phrase": "verify this numerically with code",
            "turn": 1,
            "after_call": 0,
        },
    ]
    _, _, (strict,) = await run(
        write_script, canned_kernel, turn, DERIVED_ANSWER, results=[out("42\n")], configs={"tim": {"flag_at": 1}}
    )
    assert strict.action == FLAG


async def test_monitor_off(write_script, canned_kernel):
    _, _, verdicts = await run(write_script, canned_kernel, SHORT_ANSWER, configs={"tim": {"monitor": False}})
    assert verdicts == []


def test_the_card_shows_the_evidence():
    data = {
        "flagged": True,
        "score": 3,
        "level": "strong",
        "indicators": ["no derivation", "answer read off the tool", "precursor phrases"],
        "precursors": [
            {"category": "systematic search/enumeration", "phrase": "brute force", "turn": 1, "after_call": 0}
        ],
        "phrases": ["brute force"],
        "tool_calls": 2,
        "computation_call": 2,
        "answer_call": 2,
        "words_before": 0,
        "words_after": 3,
        "derived": "none",
    }
    card = TIM.display(VerdictRecord("tim", "on_finish", FLAG, data=data))
    assert card is not None and card.flagged
    assert card_text(card).splitlines() == [
        "TIM ⚑ tool-induced myopia flagged · strong signal, 3 of 3 indicators (a hint, not proof)",
        "derivation: 0 words before call 2's output, 3 after (none)",
        "answer: repeats call 2's output",
        "phrases: “brute force” (turn 1, before any call)",
    ]
    assert TIM.note(VerdictRecord("tim", "on_finish", FLAG, data=data)) == "flagged (strong): brute force"


def test_a_verdict_recorded_before_the_graded_monitor_shows_as_it_did():
    old = {
        "flagged": True,
        "categories": ["numerical/empirical checking"],
        "phrases": ["Let's verify this numerically"],
        "tool_calls": 3,
        "answer_from_tool": True,
        "words_after_output": 7,
    }
    card = TIM.display(VerdictRecord("tim", "on_finish", FLAG, data=old))
    assert (
        card is not None
        and card.flagged
        and card_text(card).splitlines()
        == [
            "TIM ⚑ tool-induced myopia flagged (a hint, not proof)",
            "answer repeats the last tool output with 7 words of derivation after it",
            "phrases: “Let's verify this numerically”",
        ]
    )
    assert TIM.note(VerdictRecord("tim", "on_finish", FLAG, data=old)) == "flagged: Let's verify this numerically"


@pytest.mark.parametrize(
    "text, category",
    [
        ("To be safe, one checks numerically that the bound holds.", "numerical/empirical checking"),
        ("Let's verify numerically.", "numerical/empirical checking"),
        ("We can test it for a few small values.", "numerical/empirical checking"),
        ("Let's double-check with code.", "verification via code"),
        ("I will use Python to analyze the sequence.", "verification via code"),
        ("The results seem to be converging to 2.", "approximation/convergence"),
        ("Let me verify this pattern for n up to 10.", "approximation/convergence"),
        ("Let's check more values systematically.", "systematic search/enumeration"),
        ("An exhaustive check up to 1000 finds no counterexample.", "systematic search/enumeration"),
        ("We brute force all pairs.", "systematic search/enumeration"),
        # more of Table 4's examples, verbatim
        ("numerical optimization", "numerical/empirical checking"),
        ("numerical solve", "numerical/empirical checking"),
        ("implement a better approach and verify", "verification via code"),
        ("symbolic computation to verify analytical results", "verification via code"),
        ("numeric approximation converges to x", "approximation/convergence"),
        ("evaluate the sum numerically for a few terms", "approximation/convergence"),
        ("visual verification", "approximation/convergence"),
        ("logic is working", "approximation/convergence"),
        ("use code to check possible values", "systematic search/enumeration"),
        ("systematically compute possible values with code", "systematic search/enumeration"),
    ],
)
def test_table4_phrases(text, category):
    assert category in {cat for cat, _ in precursor_phrases(text)}


@pytest.mark.parametrize(
    "text",
    [
        "We check that 3 + 4 = 7, so the sum is 7.",
        "By the quadratic formula the roots are 2 and 3.",
        "The geometric series has sum 1/(1 - r) for |r| < 1.",
        "Let me compute the product in Python.",
    ],
)
def test_ordinary_reasoning_has_no_precursors(text):
    assert precursor_phrases(text) == []


def test_prose_leaves_out_code_comments_and_outputs():
    turn = (
        "Count them.\n```python\n# brute force over all values\nprint(1)\n```\n```output\n1\n```\n"
        "Use `brute_force()` here; then\n```python\n# unclosed, cut by the budget"
    )
    text = prose(turn)
    assert "Count them." in text and "then" in text
    assert "brute" not in text and "print" not in text and "1\n" not in text and "unclosed" not in text


@pytest.mark.parametrize(
    "sentence, words",
    [
        ("Pairing gives 1 + 100 = 101.", 5),
        ("So the sum is 50 · 101.", 6),
        ("The closed form is n(n+1)/2.", 8),
        ("Six times seven makes forty two.", 6),
        ("Let's work it out step-by-step with a 3-digit check.", 0),  # hyphens are not operations
        ("I will compute it.", 0),
        ("Let's verify numerically that 6 × 7 = 42.", 0),  # an announced numeric check is not a derivation
    ],
)
def test_derivation_words(sentence, words):
    assert derivation_words(sentence) == words


@pytest.mark.parametrize(
    "answer, output, same",
    [
        ("42", "42", True),
        ("42", "The total is 42.\n", True),
        ("1,234", "1234", True),
        ("\\frac{1}{2}", "1/2", True),
        ("0.5", "1/2", True),
        ("x + 1", "x + 1\n", True),
        ("43", "42", False),
        ("42", "", False),
    ],
)
def test_answer_matches_output(answer, output, same):
    assert answer_matches_output(answer, output) is same


async def test_the_monitor_reads_text_that_prunetir_pruned(write_script, canned_kernel):
    """The precursor phrase sits in the fix-up prose of an error episode; STP prunes it from the
    working context, yet the monitor reads the whole trajectory and finds it, as the eval's metric does."""
    from tuiagent.eval.metrics import run_record

    failing = "I multiply.\n```python\nprint(six * 7)\n```\n```output\n"
    fixed = "The name was wrong; let's verify numerically again.\n```python\nprint(6 * 7)\n```\n```output\n"
    error = CellResult(outputs=(Output("error", "NameError: name 'six' is not defined"),), error=True)
    _, events, verdicts = await run(
        write_script,
        canned_kernel,
        failing,
        fixed,
        SHORT_ANSWER,
        results=[error, out("42\n")],
        configs={"prunetir": {}},
    )
    pruned = [e for e in events if isinstance(e, ev.ContextPruned)]
    assert len(pruned) == 1 and "verify numerically" in pruned[0].removed_text  # gone from the context
    (v,) = [v for v in verdicts if v.hook == "on_finish"]
    assert v.action == FLAG and v.data["precursors"] == [
        {"category": "numerical/empirical checking", "phrase": "let's verify numerically", "turn": 2, "after_call": 1}
    ]
    assert v.data["level"] == "strong" and v.data["tool_calls"] == 2 and v.data["answer_call"] == 2
    record = run_record(events)
    # the guard and the eval agree
    assert (record["tim_flag"], record["tim_level"], record["tim_score"]) == (True, "strong", 3)


# The paper's own cue phrasings (section 5.6: "one numerically finds", "systematic checks show",
# "let's verify [an assumption] programmatically"; Appendix A.5's example: "We can use a Python
# script", "The Python script found ...") are precursor phrases.
PAPER_CUES = {
    "one numerically finds": "One numerically finds that the product is 42.",
    "systematic checks show": "Systematic checks show that nothing else works.",
    "verify programmatically": "Let's verify this assumption programmatically.",
    "use a Python script": "We can use a Python script to automate this process.",
    "the script found": "The Python script found one value.",
}


@pytest.mark.parametrize("name", list(PAPER_CUES))
async def test_the_papers_own_cue_phrasings_are_precursor_phrases(name, write_script, canned_kernel):
    turn = f"{PAPER_CUES[name]}\n```python\nprint(6 * 7)\n```\n```output\n"
    _, _, (v,) = await run(write_script, canned_kernel, turn, DERIVED_ANSWER, results=[out("42\n")])
    assert "precursor phrases" in v.data["indicators"], v.data


async def test_a_derivation_in_number_words_is_a_derivation(write_script, canned_kernel):
    words = "Adding three and four gives seven, and the product of seven and six is forty-two, which I now compute."
    turn = f"{words}\n```python\nprint(6 * 7)\n```\n```output\n"
    _, _, (v,) = await run(write_script, canned_kernel, turn, SHORT_ANSWER, results=[out("42\n")])
    assert v.data["derived"] == "before" and "no derivation" not in v.data["indicators"], v.data
