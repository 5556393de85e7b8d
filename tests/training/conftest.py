"""Synthetic calibration records (v2, as tuiagent.training.calibrate_collect writes them)."""

from __future__ import annotations

import numpy as np
import pytest


def record(qid, *, tool_ok, cot_ok, conf, p_unnec, cont_ok=None, calls=1, model="m"):
    """A v2 record as calibrate_collect writes it (the fields the fits read)."""
    text = f"The result is {qid}, so \\boxed{{{qid}}}"
    turns = [{"text": f"step\n```python\nprint({i})\n```\n", "stop": "stop"} for i in range(calls)]
    turns.append({"text": text, "stop": "eos"})
    blocks = [
        {
            "call": i + 1,
            "turn": i + 1,
            "executed": True,
            "error": False,
            "attc": {"confidence": conf, "mean_logprob": float(np.log(conf)), "tokens": 20},
            "necessity": {
                "rule": {"necessary": True, "p_unnecessary": 0.0},
                "model": {"necessary": p_unnec < 0.5, "p_unnecessary": p_unnec, "judge": "model"},
            },
        }
        for i in range(calls)
    ]
    r = {
        "v": 2,
        "qid": qid,
        "question": f"q{qid}",
        "gold": "1",
        "model": model,
        "tool": {
            "answer": "1",
            "correct": tool_ok,
            "reason": "answer",
            "generated_tokens": 100,
            "calls": [[f"print({i})", str(i), False, True] for i in range(calls)],
            "turns": turns,
            "final_text": text,
            "max_tool_calls": 4,
            "blocks": blocks,
        },
        "cot": {"answer": "1", "correct": cot_ok, "reason": "answer", "generated_tokens": 90},
    }
    if cont_ok is not None:
        r["continue"] = {"answer": "1", "correct": cont_ok, "reason": "answer", "generated_tokens": 180}
    return r


def synthetic(n=60, seed=0, model="m"):
    rng = np.random.default_rng(seed)
    out = []
    for q in range(n):
        tool_ok, cot_ok = bool(rng.random() < 0.7), bool(rng.random() < 0.6)
        conf = float(rng.uniform(0.85, 0.99))  # no signal, as on the default model
        out.append(
            record(
                q,
                tool_ok=tool_ok,
                cot_ok=cot_ok,
                conf=conf,
                p_unnec=float(rng.uniform(0, 0.3)),
                cont_ok=tool_ok and rng.random() < 0.8,
                calls=1 + q % 2,
                model=model,
            )
        )
    return out


# What `calibrate` writes in [calibration] for synthetic()'s 60 questions.
META = {
    "model": "m",
    "date": "2026-12-01",
    "data": "d.jsonl",
    "questions": "0-59 (60 questions)",
    "train_questions": 48,
    "heldout_questions": 12,
    "command": "tuiagent calibrate m",
}


@pytest.fixture
def synthetic_records():
    return synthetic
