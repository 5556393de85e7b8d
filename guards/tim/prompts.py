"""The TIM protocol's judge prompts ("From Proof to Program", arXiv 2511.10899, Appendix A.2-A.4):
Win Rate, Miss Rate and the reasoning error types, verbatim, each with its strict parser; registered
with the judge through the ``tuiagent.judge_prompts`` entry point."""

from __future__ import annotations

from typing import Any

from tuiagent.core import judge_schemas
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt, json_object
from tuiagent.protocol import JudgeReply


def parse_win_rate(reply: JudgeReply) -> Any:
    """ "A" or "B" from the JSON's "best_solution"."""
    data = json_object(reply.text)
    best = None if data is None else data.get("best_solution")
    return best if best in ("A", "B") else UNPARSEABLE


def parse_miss_rate(reply: JudgeReply) -> Any:
    """{"gold_steps", "missing_steps"} (counts) from the JSON's two lists of {"step": int, ...}: at least
    one gold step, and every missing step one of the gold steps (else the reply contradicts itself)."""
    data = json_object(reply.text)
    if data is None:
        return UNPARSEABLE
    gold, missing = data.get("gold_steps"), data.get("missing_steps")
    if not isinstance(gold, list) or not isinstance(missing, list) or not gold:
        return UNPARSEABLE
    steps = [s.get("step") if isinstance(s, dict) else None for s in gold]
    absent = [s.get("step") if isinstance(s, dict) else None for s in missing]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in steps + absent):
        return UNPARSEABLE
    if len(set(steps)) != len(steps) or len(set(absent)) != len(absent) or not set(absent) <= set(steps):
        return UNPARSEABLE
    return {"gold_steps": len(steps), "missing_steps": len(absent)}


ERROR_TYPES = ("logic", "assumption", "creativity", "algebra_arithmetic")


def parse_error_types(reply: JudgeReply) -> Any:
    """{type: bool} for the four error types and "none_of_the_above", from each one's "exists" ("yes" or
    "no"); "none_of_the_above" must be "yes" exactly when the four are "no", as the prompt asks."""
    data = json_object(reply.text)
    if data is None:
        return UNPARSEABLE
    said: dict[str, bool] = {}
    for key in (*ERROR_TYPES, "none_of_the_above"):
        entry = data.get(key)
        exists = entry.get("exists") if isinstance(entry, dict) else None
        if exists not in ("yes", "no"):
            return UNPARSEABLE
        said[key] = exists == "yes"
    if said["none_of_the_above"] == any(said[k] for k in ERROR_TYPES):
        return UNPARSEABLE
    return said


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

# [paper] "From Proof to Program" (TIM), Appendix A.3, "Miss Rate Evaluation Prompt", verbatim (as printed,
# "Instructions" without a colon); where the problem, the solution and the gold solution go is ours.
MISS_RATE_PROMPT = (
    "You are an expert mathematician. You will be given a mathematical problem, a solution to that problem, and a "
    "gold solution to use as a reference. Your task is to identify which logical steps from the gold solution are "
    "absent in the given solution. Instructions 1. Parse the gold solution into an ordered list of atomic logical "
    "steps (Step 1, Step 2, …). A step is the smallest self-contained claim or transformation needed to progress "
    "the proof. 2. For each gold step, decide whether the same reasoning (possibly re-worded) appears in the given "
    "solution. Mark a step as present if the solution makes the identical deduction or provides an equivalent "
    "justification. 3. Collect all steps that are absent from the given solution. Output format (strict JSON):\n"
    "{{\n"
    '  "gold_steps": [\n'
    '    {{ "step": <integer>,\n'
    '        "summary": "<one-line summary of gold step>"\n'
    "    }}\n"
    "  ],\n"
    '  "missing_steps": [\n'
    '    {{ "step": <integer>,\n'
    '        "summary": "<one-line summary of gold step\n'
    '        that is absent>"\n'
    "    }}\n"
    "  ]\n"
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution:\n{solution}\n\nGold solution:\n{gold}"  # [ours] where the inputs go
)

# [paper] "From Proof to Program" (TIM), Appendix A.4, "Reasoning Error Detection Prompt", verbatim. Section 5.4
# says the judge rates each type "on a 1–5 scale, or output None"; the printed prompt asks yes/no, which is
# what tuiagent asks and counts. Where the problem and the solution go is ours.
ERROR_TYPES_PROMPT = (
    "You are an expert mathematician grading a solution to a competition-style problem. Identify whether the "
    "solution exhibits each of the following error types: 1. Logic: Logical fallacies or unjustified leaps that "
    "disrupt reasoning. 2. Assumption: Unproven or incorrect assumptions that undermine subsequent steps. "
    "3. Creativity: Fundamentally incorrect strategy indicating failure to identify the correct approach. "
    "4. Algebra/Arithmetic: Critical algebraic or arithmetic miscalculations. 5. None of the above: No errors from "
    'the above categories are present. Evaluation Guidelines • For each category, set "exists" to "yes" if '
    'that error occurs; otherwise "no". • Provide a brief explanation for each category; if an error is '
    'detected, indicate where it occurs. • Mark None of the above as "yes" only if all other categories are '
    '"no". Output format (strict JSON):\n'
    "{{\n"
    '  "logic": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n            }},\n'
    '  "assumption": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                }},\n"
    '  "creativity": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                }},\n"
    '  "algebra_arithmetic": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                        }},\n"
    '  "none_of_the_above": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                        }}\n"
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution:\n{solution}"  # [ours] where the inputs go
)


PROMPTS = (
    # max_tokens [ours]: the JSON asks for eight scores with explanations
    JudgePrompt(
        "win_rate",
        1,
        WIN_RATE_PROMPT,
        "[paper] From Proof to Program (TIM), Appendix A.2, Win Rate (input layout ours)",
        parse_win_rate,
        1024,
        ("problem", "a", "b"),
        pair=("a", "b"),
        schema=judge_schemas.WIN_RATE,
    ),
    # max_tokens [ours]: a one-line summary per gold step; five explanations
    JudgePrompt(
        "miss_rate",
        1,
        MISS_RATE_PROMPT,
        "[paper] From Proof to Program (TIM), Appendix A.3, Miss Rate (input layout ours)",
        parse_miss_rate,
        1024,
        ("problem", "solution", "gold"),
        schema=judge_schemas.MISS_RATE,
    ),
    JudgePrompt(
        "error_types",
        1,
        ERROR_TYPES_PROMPT,
        "[paper] From Proof to Program (TIM), Appendix A.4, reasoning error detection (input layout ours)",
        parse_error_types,
        768,
        ("problem", "solution"),
        schema=judge_schemas.ERROR_TYPES,
    ),
)
