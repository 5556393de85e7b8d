"""The semantic-distractor stress test: variants written by a (scripted) model, cached with model and prompt."""

from __future__ import annotations

import json

from guards.gstep.distractors import (
    DISTRACTORS,
    distractor_prompt,
    distractor_variants,
    evidence_sentence,
    hedge,
    hedged_entry,
    insert_distractor,
    solution_values,
    valid_variant,
)
from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent import paths
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.eval.datasets import Problem
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store, to_markdown
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings

KINDS = ["thematic", "parallel"]


def writer(problems, *, question_for: str | None = None):
    """A scripted model that answers each generation request, in order, with the text to add."""
    turns = []
    for p in problems:
        for kind in KINDS:
            if p.id == question_for and kind == "parallel":
                text = "Her friend has 17 apples. What is the sum?"  # asks a question of its own
            elif kind == "thematic":
                text = 'Added text: "The village fair is famous for its music."\n\nThis adds background.'
            else:
                text = "Her cousin has 17 apples."
            turns.append(split_tokens(text, -0.1))
    calls = []

    def factory():
        calls.append(1)
        return ScriptedBackend(turns, model_id="writer", template="chatml")

    return factory, calls


def test_prompt_and_validity():
    prompt = distractor_prompt("What is 3 plus 3?", "parallel")
    assert "parallel entity" in prompt and "What is 3 plus 3?" in prompt and "added text only" in prompt
    assert distractor_prompt("What is 3 plus 3?", "hedged") == ""  # HU asks no model
    assert set(DISTRACTORS) == {"thematic", "paraphrase", "parallel", "hedged"}
    assert valid_variant("What is 3 plus 3?", "Some think it was 4. What is 3 plus 3?") == (True, "")
    assert valid_variant("What is 3 plus 30?", "What is 3 plus three tens? Maybe.")[0] is False
    assert valid_variant("What is 3 plus 3?", "What is 3 plus 3?") == (False, "no text was added")
    two = "Ann has 3 pens. How many pens does she have?"
    assert valid_variant(two, "Ann has 3 pens. Her  brother has 5.\nHow many pens does she have?") == (True, "")
    ok, why = valid_variant(two, "Ann has 3 pens. The answer is 3, as her brother says it is.")  # no question
    assert not ok and "sentence" in why and "How many pens" in why
    assert valid_variant(two, "Ann has 3 pens. Has Bo 5? How many pens does she have?") == (
        False,
        "the added text asks a question",
    )


def test_a_variant_that_states_a_value_of_the_solution_is_left_out():
    """The writing prompt says the added text must not solve the problem: it may not state the gold
    answer or a GSM8K step's result that the question does not state itself."""
    reference = "She paid 100 * 3/4 = <<100*3/4=75>>75.\nThe loss was 100 - 75 = <<100-75=25>>25.\n#### 25"
    solved = solution_values("25", reference)
    assert solved == {75.0, 25.0}
    question = "A hotel spent $100. Clients paid 3/4 of it. What was the loss?"
    at = "A hotel spent $100. "
    assert valid_variant(question, question.replace(at, at + "The hotel is in Ohio. "), solved) == (True, "")
    for told, value in (("The loss was $25.", "25"), ("Clients paid $75.00 in all.", "75.00")):
        ok, why = valid_variant(question, question.replace(at, at + told + " "), solved)
        assert (ok, why) == (False, f"the added text states a value of the solution ({value})")
    assert valid_variant(question, question.replace(at, at + "It spent $100 last year too. "), {100.0})[0]  # given
    assert valid_variant(question, question.replace(at, at + "The loss was $25. "))[0]  # no solution: unchecked


def test_the_distractor_goes_between_the_sentences_and_the_question_keeps_its_text():
    three = "Ann has 3 pens.  Bo has 2.  How many pens do they have?"  # GSM8K's double spaces kept
    places = {insert_distractor(three, "Cy has 9.", kind) for kind in ["thematic", "parallel", "hedged", "x", "y"]}
    assert places <= {
        "Ann has 3 pens.  Cy has 9. Bo has 2.  How many pens do they have?",
        "Ann has 3 pens.  Bo has 2.  Cy has 9. How many pens do they have?",
    }
    assert len(places) == 2  # the place depends on the type (and the question), never before the first sentence
    assert insert_distractor(three, "Cy has 9.", "parallel") == insert_distractor(three, "Cy has 9.", "parallel")
    assert insert_distractor("What is 1 plus 1?", "Cy has 9.", "parallel") == "Cy has 9. What is 1 plus 1?"
    assert insert_distractor(three, "", "parallel") == three
    titled = "Mr. Gardner bakes 20 cookies for Dr. Lee at 9 a.m. on Monday. How many are left?"
    assert {insert_distractor(titled, "Cy has 9.", kind) for kind in ["thematic", "parallel", "hedged", "x"]} == {
        "Mr. Gardner bakes 20 cookies for Dr. Lee at 9 a.m. on Monday. Cy has 9. How many are left?"
    }  # never inside "Mr. Gardner", "Dr. Lee" or "a.m. on"


def test_hu_puts_the_papers_hedging_cue_before_a_sentence_of_the_evidence():
    """Section 2.1: Hedged Uncertainty "adds hedging cues such as 'reportedly' to simulate uncertain
    information sources": the cue before one sentence of the evidence, never before the question asked;
    the facts and every other sentence as written."""
    q = "Ann has 3 pens.  The shop has 5 more.  Bo has 2.  How many pens do Ann and Bo have?"
    variant = hedge(q)
    assert variant.count("Reportedly, ") == 1 and variant.endswith("How many pens do Ann and Bo have?")
    assert variant in {
        q.replace("Ann has", "Reportedly, Ann has"),
        q.replace("The shop", "Reportedly, the shop"),  # a common word loses its capital, a name keeps it
        q.replace("Bo has 2", "Reportedly, Bo has 2"),
    }
    assert valid_variant(q, variant, changed=evidence_sentence(q, "hedged")) == (True, "")
    assert hedged_entry(q)["model"] == "rule" and hedged_entry(q)["variant"] == variant


async def test_sp_rewrites_a_sentence_of_the_evidence_in_its_place():
    """Section 2.1: Semantic Paraphrase "paraphrases evidence while preserving meaning": the writer
    rewrites one sentence of the evidence, which the rewrite replaces; a rewrite that loses a number,
    or comes back unchanged, is left out."""
    q = "Ann has 3 pens. Bo has 2. How many pens do they have?"
    sentence = evidence_sentence(q, "paraphrase")
    assert sentence in {"Ann has 3 pens.", "Bo has 2."}
    rewrite = {"Ann has 3 pens.": "Three pens, 3 in all, belong to Ann.", "Bo has 2.": "Bo owns 2 of them."}[sentence]
    for reply, ok in ((rewrite, True), ("Ann has pens.", False), (sentence, False)):
        backend = ScriptedBackend([split_tokens(reply, -0.1)], model_id=f"sp-{len(reply)}-{ok}", template="chatml")
        variants, invalid = await distractor_variants(
            [Problem("t", "1", q, "5")], ["paraphrase"], model_id=backend.model_id, backend_factory=lambda b=backend: b
        )
        assert (len(variants), len(invalid)) == ((1, 0) if ok else (0, 1)), (reply, invalid)
        if ok:
            assert variants[0].question == q.replace(sentence, rewrite) and sentence in distractor_prompt(
                q, "paraphrase"
            )
    titled = "Mr. Gardner bakes 20 cookies. How many are left?"  # "Mr." ends no sentence
    assert evidence_sentence(titled, "paraphrase") == "Mr. Gardner bakes 20 cookies."
    rewritten = titled.replace("Mr. Gardner bakes 20 cookies.", "Mr. Gardner makes 20 cookies.")
    assert valid_variant(titled, rewritten, changed="Mr. Gardner bakes 20 cookies.") == (True, "")


async def test_variants_are_generated_once_and_cached_with_model_and_prompt():
    problems = [Problem("tiny", "1", "What is 1 plus 1?", "2"), Problem("tiny", "2", "What is 2 plus 2?", "4")]
    factory, calls = writer(problems, question_for="2")
    variants, invalid = await distractor_variants(problems, KINDS, model_id="writer", backend_factory=factory)
    assert [(v.id, v.variant) for v in variants] == [
        ("1", "distractor:thematic"),
        ("1", "distractor:parallel"),
        ("2", "distractor:thematic"),
    ]
    assert (
        variants[0].question == "The village fair is famous for its music. What is 1 plus 1?"
    )  # label, quotes, rest cut
    assert variants[1].question == "Her cousin has 17 apples. What is 1 plus 1?" and variants[1].gold == "2"
    assert [(i["id"], i["kind"]) for i in invalid] == [("2", "parallel")] and "question" in invalid[0]["why"]
    files = sorted((paths.cache_dir() / "eval" / "distractors" / "writer").glob("*.json"))
    assert len(files) == 4
    entry = json.loads(files[0].read_text())
    assert entry["model"] == "writer" and entry["prompt"] == distractor_prompt(entry["question"], entry["kind"])
    assert entry["reply"] and entry["added"] in entry["variant"]
    again, _ = await distractor_variants(problems, KINDS, model_id="writer", backend_factory=factory)
    assert calls == [1] and [v.question for v in again] == [v.question for v in variants]  # from the cache


async def test_a_written_variant_that_states_the_answer_or_a_step_is_left_out():
    reference = "Bo has 2 * 3 = <<2*3=6>>6 pens.\nTogether 3 + 6 = <<3+6=9>>9.\n#### 9"
    problem = Problem(
        "tiny", "1", "Ann has 3 pens. Bo has twice as many. How many do they have?", "9", reference=reference
    )
    for told, why in (("Cy has 1 pen.", None), ("Bo has 6 pens.", "(6)"), ("They have 9 in all.", "(9)")):
        backend = ScriptedBackend([split_tokens(told, -0.1)], model_id=f"writer-{len(told)}", template="chatml")
        variants, invalid = await distractor_variants(
            [problem], ["thematic"], model_id=backend.model_id, backend_factory=lambda b=backend: b
        )
        assert (len(variants), [i["why"][-3:] for i in invalid]) == ((1, []) if why is None else (0, [why]))


async def test_eval_reports_accuracy_per_distractor_type_beside_clean(tmp_path, dataset):
    data = dataset(2)

    def turns(job):  # the model is fooled by the parallel entity
        i = number_in(job.problem.question)
        fooled = job.problem.variant == "distractor:parallel"
        return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i + 17 if fooled else 2 * i))]

    problems = [Problem("tiny", str(i), f"What is {i} plus {i}?", str(2 * i)) for i in (1, 2)]
    writer_factory, _ = writer(problems)
    cfg = EvalConfig(
        datasets=[str(data)],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        protocols=["distractors"],
        options={"tooltax": {"types": KINDS, "model": None}},
    )
    outcome = await run_eval(
        cfg,
        backend_factory=Factory(turns),
        variant_backend=writer_factory,
        kernels={"jupyter": lambda gold=None: CalcKernel()},
        log=lambda m: None,
    )
    assert outcome.ran == 6
    assert "tiny/1~distractor:parallel/none/0" in ResultStore(cfg.out).records
    summary = summary_from_store(cfg.out)
    section = summary["datasets"]["tiny"]["distractors"]["none"]
    assert section["clean"]["accuracy"] == 1.0
    assert section["thematic"] == {"runs": 2, "accuracy": 1.0, "delta_vs_clean": 0.0}
    assert section["parallel"] == {"runs": 2, "accuracy": 0.0, "delta_vs_clean": -1.0}
    assert "semantic distractors" in to_markdown(summary)
    manifest = ResultStore(cfg.out).manifest()
    assert manifest["distractor_model"] == "scripted" and manifest["distractors"] == KINDS
