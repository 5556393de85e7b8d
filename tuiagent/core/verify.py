"""Answer checking with math-verify.

math-verify's own timeouts use SIGALRM, which works only on the main thread;
runs happen in worker threads and event loops, so its timeouts are turned off
and the check runs in a daemon thread that we stop waiting for after ``timeout_s``.
"""

from __future__ import annotations

import logging
import threading

logging.getLogger("math_verify").setLevel(logging.ERROR)


def _as_latex(answer: str) -> str:
    answer = answer.strip()
    return answer if "\\boxed" in answer else "\\boxed{" + answer + "}"


def _check(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(_as_latex(gold), parsing_timeout=None)
    answer_parsed = parse(_as_latex(answer), parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return gold.strip() == answer.strip()
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


def is_correct(gold: str, answer: str | None, *, timeout_s: float = 10.0) -> bool | None:
    """True/False when the answer matches the gold one; None when the check timed out."""
    if answer is None:
        return False
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(_check(gold, answer)), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return result[0] if result else None
