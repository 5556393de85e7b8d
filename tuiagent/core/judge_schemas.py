"""JSON schemas of the replies the papers' judge prompts ask for, for a judge whose replies are
constrained to them (``tuiagent eval --judge-json``): the structured outputs of llama.cpp (a grammar),
vLLM and OpenAI-compatible servers.

Each schema transcribes the JSON format its prompt prints, key for key and in the printed order
[ours: the papers print formats, not schemas]. Constraining changes what a judge can say, not what it
is asked: the prompt is the paper's, verbatim, and the strict parser still reads the reply (a reply
cut at ``max_tokens``, or one whose parts contradict each other, stays unparseable). A small model
asked for a long JSON often breaks the format or copies the template ("A or B"); constrained, it has
to choose, and asking a pairwise question in both orders shows whether the choice means anything.
"""

from __future__ import annotations

from typing import Any

# [ours] the explanations' length bound: ten of them fit in the Win Rate prompt's max_tokens
EXPLANATION_CHARS = 300

Schema = dict[str, Any]


def _obj(**properties: Schema) -> Schema:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


_TEXT: Schema = {"type": "string", "maxLength": EXPLANATION_CHARS}
_YES_NO: Schema = {"enum": ["yes", "no"]}


def _grades() -> Schema:
    score: Schema = {"type": "integer", "minimum": 0, "maximum": 5}
    category = _obj(score=score, explanation=_TEXT)
    return _obj(
        logic=category,
        assumption=category,
        creativity=category,
        algebra_arithmetic=category,
        final_score=_obj(score={"type": "number", "minimum": 0, "maximum": 5}),
    )


# TIM (From Proof to Program), Appendix A.2: the Win Rate reply
WIN_RATE = _obj(A_grades=_grades(), B_grades=_grades(), best_solution={"enum": ["A", "B"]})

# TIM, Appendix A.3: the Miss Rate reply (the parser checks that missing steps are gold steps)
_STEP = _obj(step={"type": "integer", "minimum": 1}, summary=_TEXT)
MISS_RATE = _obj(
    gold_steps={"type": "array", "items": _STEP, "minItems": 1},
    missing_steps={"type": "array", "items": _STEP},
)

# TIM, Appendix A.4: the error-type reply
_EXISTS = _obj(exists=_YES_NO, explanation=_TEXT)
ERROR_TYPES = _obj(
    logic=_EXISTS, assumption=_EXISTS, creativity=_EXISTS, algebra_arithmetic=_EXISTS, none_of_the_above=_EXISTS
)

# Spurious Tool Use, Appendix A.3: the tool-necessity and the answer-correctness replies
NECESSITY = _obj(tool_necessary={"type": "boolean"}, reason=_TEXT)
CORRECTNESS = _obj(analysis=_TEXT, true_false={"type": "boolean"})
