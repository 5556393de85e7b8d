"""How many threads llama.cpp gets when a model's options name none."""

from __future__ import annotations

import os

from tuiagent.backends.llama_model import default_threads


def test_omp_num_threads_wins_when_it_is_a_positive_number():
    assert default_threads({"OMP_NUM_THREADS": "1"}) == 1
    assert default_threads({"OMP_NUM_THREADS": " 3 "}) == 3


def test_otherwise_every_cpu_this_process_may_run_on_not_every_cpu_of_the_machine():
    allowed = len(os.sched_getaffinity(0))
    for env in ({}, {"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "four"}, {"OMP_NUM_THREADS": "2,1"}):
        assert default_threads(env) == allowed
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert default_threads({}) == 1
    finally:
        os.sched_setaffinity(0, before)
