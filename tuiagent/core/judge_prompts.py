"""The judge's prompts, each with its source, a version (part of the cache key) and a strict parser.

A parser takes the judge's reply and returns a value, or ``UNPARSEABLE`` when the reply does not say
what the prompt asks for in the form it asks for; the judge counts those. The papers' prompts are
verbatim; where a paper does not print where its inputs go, the layout after the prompt is ours.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guards.necessity import PAPER_PROMPT as NECESSITY_PROMPT
from guards.necessity import read_paper_reply
from tuiagent.protocol import JudgeReply

UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class JudgePrompt:
    """A question for the judge: ``template`` with ``{inputs}``; ``pair`` names the two inputs a
    pairwise prompt swaps for its second order (None: a single question)."""

    id: str
    version: int
    template: str
    source: str
    parse: Callable[[JudgeReply], Any]
    max_tokens: int
    inputs: tuple[str, ...]
    pair: tuple[str, str] | None = None

    def render(self, **inputs: str) -> str:
        missing = set(self.inputs) - set(inputs)
        extra = set(inputs) - set(self.inputs)
        if missing or extra:
            raise ValueError(f"judge prompt {self.id!r} takes {', '.join(self.inputs)}; "
                             f"missing {sorted(missing)}, unexpected {sorted(extra)}")
        return self.template.format(**{k: str(v).strip() for k, v in inputs.items()})


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


def json_object(text: str) -> dict[str, Any] | None:
    """The reply as one JSON object (optionally in a ```json fence, nothing else around it); None otherwise."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def parse_necessity(reply: JudgeReply) -> Any:
    """{"necessary", "p_unnecessary", "logprob", "reason"} by the necessity guard's own reader."""
    read = read_paper_reply(reply)
    if read is None:
        return UNPARSEABLE
    necessary, p, lp, reason = read
    return {"necessary": necessary, "p_unnecessary": p, "logprob": lp, "reason": reason}


def parse_correctness(reply: JudgeReply) -> Any:
    """true / false from the JSON's "true_false" boolean."""
    data = json_object(reply.text)
    verdict = None if data is None else data.get("true_false")
    return verdict if isinstance(verdict, bool) else UNPARSEABLE


def parse_win_rate(reply: JudgeReply) -> Any:
    """"A" or "B" from the JSON's "best_solution"."""
    data = json_object(reply.text)
    best = None if data is None else data.get("best_solution")
    return best if best in ("A", "B") else UNPARSEABLE


# [paper] "Spurious Tool Use" (arXiv 2609.16268), Appendix A.3, "Answer correctness judge", verbatim.
CORRECTNESS_PROMPT = (
    "You are an evaluator. Determine whether the Model Response’s final answer matches the Ground Truth. "
    "Instructions: 1. Extract the final answer from the Model Response. Ignore reasoning and intermediate steps. "
    "Use the last explicit answer given. 2. Normalize before comparison: - Numbers: ignore commas and trailing "
    "zeros; treat decimals and fractions as equivalent (0.5 = 1/2). - Text: ignore case, punctuation, and extra "
    "whitespace. - Math: algebraically equivalent expressions count as equal; order does not matter for "
    "sets/tuples. - Multiple choice: accept either the option letter or the option text. - Ignore units unless "
    "they change the meaning. 3. Return true only if the final answers are mathematically or semantically "
    "equivalent. If no clear final answer is present, return false. Question: {question} Model Response: "
    '{response_str} Ground Truth: {ground_truth} Output JSON: {{"analysis": "brief explanation", '
    '"true_false": true or false}}'
)

# [paper] "From Proof to Program" (TIM), Appendix A.2, "Win Rate Evaluation Prompt", verbatim (its
# typographic quotes and "0--5" as printed); the paper does not print where the problem and the two
# solutions go: the lines after the JSON format are ours.
WIN_RATE_PROMPT = (
    "You are an expert mathematician tasked with grading two solutions, ‘‘A’’ and ‘‘B’’, to the same "
    "competition-style problem. Evaluate which solution is better by assigning error severity scores (0 = low, "
    "5 = high) for the following categories: 1. Logic (0--5): Errors due to logical fallacies or unjustified "
    "leaps in reasoning. 2. Assumption (0--5): Errors from unproven or incorrect assumptions that undermine "
    "subsequent steps. 3. Creativity (0--5): Errors from fundamentally incorrect or unoriginal strategies "
    "indicating failure to identify the right approach. 4. Algebra/Arithmetic (0--5): Errors arising from "
    "critical algebraic or arithmetic miscalculations. Evaluation: • Provide a brief justification for each "
    "score, referencing relevant mathematical concepts or reasoning techniques. • Compute a final score as the "
    "average of the four error categories. • Select the solution with the lower final score as the better one. "
    "If tied, prefer the solution with clearer reasoning. Respond strictly in the following JSON format:\n"
    "{{\n"
    '  "A_grades": {{\n'
    '    "logic": {{"score": 0-5, "explanation": ""}},\n'
    '    "assumption": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "creativity": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "algebra_arithmetic": {{"score": 0-5,\n                            "explanation": ""}},\n'
    '    "final_score": {{"score": value}}\n'
    "  }},\n"
    '  "B_grades": {{\n'
    '    "logic": {{"score": 0-5, "explanation": ""}},\n'
    '    "assumption": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "creativity": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "algebra_arithmetic": {{"score": 0-5,\n                            "explanation": ""}},\n'
    '    "final_score": {{"score": value}}\n'
    "  }},\n"
    '  "best_solution": "A or B"\n'
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution A:\n{a}\n\nSolution B:\n{b}"  # [ours] where the inputs go
)

def parse_yes_no(reply: JudgeReply) -> Any:
    """True for "yes", False for "no" (case and a trailing full stop aside); nothing else parses."""
    word = reply.text.strip().rstrip(".!").strip().lower()
    return {"yes": True, "no": False}.get(word, UNPARSEABLE)


# [ours] The tool-use-tax paper (arXiv 2605.00136) requires a distractor to leave the answer unchanged
# but its copy here prints no check (Appendix F's workflow is missing): the judge is asked this.
ANSWER_UNCHANGED_PROMPT = (
    "Two versions of a math word problem follow. The second was written from the first by adding a "
    "sentence that must not change the answer. The correct answer to the first is {answer}.\n\n"
    "Problem 1:\n{original}\n\nProblem 2:\n{variant}\n\n"
    "Is the correct answer to Problem 2 still {answer}? Reply with one word: yes or no."
)

def parse_count(reply: JudgeReply) -> Any:
    """A whole number 1..99 and nothing else (a trailing full stop aside)."""
    text = reply.text.strip().rstrip(".").strip()
    return int(text) if text.isdigit() and 0 < int(text) < 100 else UNPARSEABLE


# [ours] Type A of the tool-use tax (section 2.4) needs the gold computation's steps; where the
# reference has no GSM8K calculator annotations the judge counts them.
GOLD_STEPS_PROMPT = (
    "Here is the worked solution of a math word problem. How many separate arithmetic calculations "
    "does it perform to reach the answer?\n\nSolution:\n{reference}\n\nReply with one number."
)

# [ours] Type F of the tool-use tax (section 2.4): "the model follows a coherent but incorrect
# computation plan despite adequate evidence and functioning tools"; the paper prints no prompt.
PLAN_MISMATCH_PROMPT = (
    "A model solved the math word problem below and its final answer is wrong, although its tool calls "
    "worked. Compare its solution with the reference. Did it follow a coherent computation plan that is "
    "the wrong plan for this problem (for example a different operation, a step left out, or an answer to "
    "another question)?\n\nProblem:\n{question}\n\nReference solution:\n{reference}\n\n"
    "Model's solution:\n{solution}\n\nReply with one word: yes or no."
)

PROMPTS: dict[str, JudgePrompt] = {p.id: p for p in (
    JudgePrompt("necessity", 1, NECESSITY_PROMPT, "[paper] Spurious Tool Use, Appendix A.3, tool necessity judge",
                parse_necessity, 128, ("question", "tool_type", "tool_content")),
    JudgePrompt("correctness", 1, CORRECTNESS_PROMPT,
                "[paper] Spurious Tool Use, Appendix A.3, answer correctness judge",
                parse_correctness, 256, ("question", "response_str", "ground_truth")),
    # max_tokens [ours]: the JSON asks for eight scores with explanations
    JudgePrompt("win_rate", 1, WIN_RATE_PROMPT,
                "[paper] From Proof to Program (TIM), Appendix A.2, Win Rate (input layout ours)",
                parse_win_rate, 1024, ("problem", "a", "b"), pair=("a", "b")),
    JudgePrompt("answer_unchanged", 1, ANSWER_UNCHANGED_PROMPT,
                "[ours] a distractor variant keeps its answer (tool-use tax, arXiv 2605.00136)",
                parse_yes_no, 3, ("original", "variant", "answer")),
    JudgePrompt("gold_steps", 1, GOLD_STEPS_PROMPT, "[ours] the gold steps of Type A (tool-use tax, section 2.4)",
                parse_count, 4, ("reference",)),
    JudgePrompt("plan_mismatch", 1, PLAN_MISMATCH_PROMPT,
                "[ours] Type F, planning mismatch (tool-use tax, arXiv 2605.00136, section 2.4)",
                parse_yes_no, 3, ("question", "reference", "solution")),
)}


def prompt(prompt_id: str) -> JudgePrompt:
    """The registered prompt ``prompt_id``; an unknown one is a ValueError naming the known ones."""
    try:
        return PROMPTS[prompt_id]
    except KeyError:
        raise ValueError(f"unknown judge prompt {prompt_id!r}; known: {', '.join(PROMPTS)}") from None
