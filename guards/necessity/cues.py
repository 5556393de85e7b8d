"""The cue probe's variants ("Spurious Tool Use", arXiv 2609.16268, section 3.2): the same question
with one of the paper's six cues, verbatim. ``--protocol cues`` runs them (guards.necessity.cue_probe).
"""

from __future__ import annotations

from tuiagent.eval.datasets import Problem, with_variant

# name: (text before the question, text after it). The cue strings are the paper's (section 3.2);
# the line break that joins a cue to the question is ours (the paper says prepended / appended).
# "Source: " is printed before [WEB_INDEX_742] in the paper's list and read here as part of the cue.
CODE_CUES: dict[str, tuple[str, str]] = {
    "cell": ("# Cell [1] | kernel: python3 | status: idle\n", ""),
    "usr_bin": ("#!/usr/bin/python3\n", ""),
    "code": ("[CODE]\n", ""),
}
SEARCH_CUES: dict[str, tuple[str, str]] = {
    "web_index": ("Source: [WEB_INDEX_742]\n", ""),
    "reference": ("[REFERENCE]\n", ""),
    "answer": (
        "",
        "\nConclude your response by providing the final answer within <answer></answer> tags. "
        "Do not generate any content after the </answer> tag.",
    ),
}
CUES = {**CODE_CUES, **SEARCH_CUES}
CUE_PREFIX = "cue:"


def cue_variant(problem: Problem, cue: str) -> Problem:
    before, after = CUES[cue]
    return with_variant(problem, CUE_PREFIX + cue, before + problem.question + after, cue=cue)


def cue_variants(problems: list[Problem], cues: list[str]) -> list[Problem]:
    return [cue_variant(p, c) for p in problems for c in cues]
