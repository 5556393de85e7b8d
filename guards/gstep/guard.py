"""G-STEP: a learned answer gate against the tool-use tax ("Are Tools All We Need?", arXiv 2605.00136).

Whenever the model submits a final text without a tool call, safety rules first, then a small MLP
over 120 features of the run (guards.gstep.features) decide: commit the answer, or continue with
one more, corrected tool call (a *replan*, *force* or *duplicate* prompt where those apply). The
gate reads the run in the frame it was trained in and warns when its inputs lie outside its
training range. ``weights``: "auto" (the gate shipped for the default model), "off" or a path to
an .npz written by guards.gstep.training. The rules in order, the prompts, the gate, its training
and every constant with its source: docs/papers/tool-use-tax.md#g-step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np

from guards.base import GuardBase, setting, verdict_data
from guards.gstep.features import (
    N_FEATURES,
    NUMERIC_NAMES,
    TEXT_BINS,
    answer_value,
    features,
    gate_input_from_view,
    norm_text,
    normalise_code,
    numeric_features,
    same,
    value,
)
from tuiagent.protocol import (
    COMMIT,
    CONTINUE,
    SKIP,
    Display,
    Gauge,
    RunRecord,
    RunSettings,
    RunView,
    Span,
    Verdict,
    VerdictRecord,
)

DEFAULT_GATE_MODEL = "qwen2.5-coder-1.5b"
DATA_DIR = Path(__file__).resolve().parent / "data"
# A gate file without max_tool_calls (format v1) was trained at the loop's default budget: every
# v1 collection ran with it (the shipped records all say 4).
V1_BUDGET = RunSettings().max_tool_calls
GATE_OFF = "gate off (calibration: never continue)"


def shipped_weights(model: str = DEFAULT_GATE_MODEL) -> Path:
    """Where the gate trained for ``model`` ships."""
    return DATA_DIR / f"gstep-{model}.npz"


class GateError(RuntimeError):
    """The gate's weights file is missing or not a G-STEP gate."""


class OutOfRange(TypedDict):
    """An input the gate never saw the like of: its value and the training rows' mean and sd."""

    value: float
    mean: float
    sd: float


class Gate:
    """The gate evaluated with numpy: z = (x - mean) / scale; ReLU hidden layers; logistic output.

    ``budget``: the tool budget the gate was trained at (its budget frame); ``train_sd``: each
    feature's sd over the training rows, 0 where it was constant (None: a file from before the
    range check, which cannot be checked: its ``scale`` is 1 for a constant feature)."""

    def __init__(
        self,
        mean: np.ndarray,
        scale: np.ndarray,
        layers: list[tuple[np.ndarray, np.ndarray]],
        meta: dict[str, Any] | None = None,
        train_sd: np.ndarray | None = None,
    ):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.layers = [(np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)) for w, b in layers]
        self.meta = meta or {}
        self.train_sd = None if train_sd is None else np.asarray(train_sd, dtype=np.float64)
        width = self.mean.shape[0]
        if self.scale.shape != (width,) or not self.layers:
            raise GateError("the gate's scaler and layers do not fit together")
        for w, b in self.layers:
            if w.ndim != 2 or w.shape[0] != width or b.shape != (w.shape[1],):
                raise GateError(f"a layer of shape {w.shape} / {b.shape} does not follow width {width}")
            width = w.shape[1]
        if width != 1:
            raise GateError(f"the gate's output layer has {width} units, not 1")
        if not (np.all(np.isfinite(self.mean)) and np.all(np.isfinite(self.scale)) and np.all(self.scale != 0)):
            raise GateError("the gate's scaler has non-finite or zero values")
        if self.train_sd is not None and (
            self.train_sd.shape != self.mean.shape
            or not np.all(np.isfinite(self.train_sd))
            or np.any(self.train_sd < 0)
        ):
            raise GateError("the gate's train_sd does not fit its scaler, or is negative or non-finite")
        text_bins = self.meta.get("text_bins", "final")  # files from before it was recorded: "final"
        if text_bins not in TEXT_BINS:
            raise GateError(f"the gate's text_bins is {text_bins!r}, not one of {', '.join(TEXT_BINS)}")
        self.text_bins: str = text_bins
        budget = self.meta.get("max_tool_calls", V1_BUDGET)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise GateError(f"the gate's max_tool_calls is {budget!r}, not a tool budget")
        self.budget = budget

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_file(cls, path: Path) -> Gate:
        path = Path(path)
        if not path.is_file():
            raise GateError(f"no G-STEP weights at {path} (train them: python -m guards.gstep.training train ...)")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
            meta = json.loads(str(arrays.pop("meta"))) if "meta" in arrays else {}
            n = int(meta.get("n_layers", sum(1 for k in arrays if k.startswith("W"))))
            layers = [(arrays[f"W{i}"], arrays[f"b{i}"]) for i in range(n)]
            gate = cls(arrays["mean"], arrays["scale"], layers, meta, arrays.get("train_sd"))
        except GateError as e:
            raise GateError(f"{path}: {e}") from None
        except Exception as e:  # a truncated zip, a pickled array, a missing key ...
            raise GateError(f"{path} is not a readable G-STEP weights file ({type(e).__name__}: {e})") from None
        if gate.n_features != N_FEATURES:
            raise GateError(f"{path} expects {gate.n_features} features, G-STEP computes {N_FEATURES}")
        return gate

    @classmethod
    def from_sklearn(cls, scaler: Any, mlp: Any) -> Gate:
        """From a fitted StandardScaler and binary MLPClassifier (class 1 = continue)."""
        return cls(scaler.mean_, scaler.scale_, list(zip(mlp.coefs_, mlp.intercepts_)), train_sd=np.sqrt(scaler.var_))

    def p_continue(self, x: np.ndarray) -> np.ndarray:
        """P(continue) for each row of ``x`` (a 1-d vector gives a 0-d array)."""
        h = (np.asarray(x, dtype=np.float64) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        z = np.clip(h[..., 0], -500.0, 500.0)
        return 1.0 / (1.0 + np.exp(-z))

    def outside(self, x: np.ndarray, k: float) -> dict[str, OutOfRange] | None:
        """The numeric features of ``x`` far outside the training rows: more than ``k`` training sds
        from the training mean, or unlike a value that was constant in training. The hashed bins
        are not checked: they are sparse token counts, and a token in a bin no training text filled
        is common, not a state the gate never saw [ours]. None: no ``train_sd``, nothing known."""
        if self.train_sd is None:
            return None
        out: dict[str, OutOfRange] = {}
        for i, name in enumerate(NUMERIC_NAMES):
            v, mean, sd = float(x[i]), float(self.mean[i]), float(self.train_sd[i])
            if abs(v - mean) > k * sd if sd > 0 else not same(v, mean):
                out[name] = {"value": round(v, 4), "mean": round(mean, 4), "sd": round(sd, 4)}
        return out


def range_words(out: dict[str, OutOfRange]) -> str:
    """The out-of-range inputs in a line: ``budget_remaining 8 (trained 3.29 ± 0.69)``, and for a
    feature constant in training ``error_count 1 (always 0 in training)``."""

    def one(name: str, r: OutOfRange) -> str:
        trained = f"always {r['mean']:g} in training" if r["sd"] == 0 else f"trained {r['mean']:g} ± {r['sd']:g}"
        return f"{name} {r['value']:g} ({trained})"

    return ", ".join(one(n, r) for n, r in out.items())


# -- prompts (our words, docs/papers/tool-use-tax.md#g-step's meaning) --------------------------------------------------------


def _result_text(output: str, limit: int = 200) -> str:
    text = output.strip()
    if len(text) > limit:
        text = text[: limit // 2] + " ... " + text[-limit // 2 :]
    return text if text else "(nothing printed)"


def previous_result(view: RunView) -> str:
    """What the continue prompts say about the previous tool result."""
    executed = [c for c in view.calls if c.executed]
    ok = [c for c in executed if not (c.error or c.timed_out)]
    if ok:
        return f"The previous tool result was: {_result_text(ok[-1].output)}."
    if executed:
        last = executed[-1].output.strip().splitlines()
        return f"The previous tool call failed ({_result_text(last[-1] if last else '')})."
    return "No code has been run yet."


CRITIC = (
    "First I will explain in words what could be wrong with that computation, and only then write "
    "the corrected, complete ```python block."
)


def continue_prompt(view: RunView, critic: bool) -> str:
    text = (
        f"Wait, before I give the final answer, let me verify. {previous_result(view)} Did I take the "
        "right numbers from the problem, and did I actually compute every step? If something is missing "
        "or wrong, I will write a corrected, complete ```python block (not the same block as before) "
        "that computes the whole answer."
    )
    return text + (" " + CRITIC if critic else "") + "\n"


def replan_prompt(view: RunView, critic: bool) -> str:
    text = (
        f"Wait, my code keeps giving the same output, so that result may be stale. {previous_result(view)} "
        "Let me read the problem again, re-derive the plan step by step, and write a revised ```python "
        "block that follows the new plan."
    )
    return text + (" " + CRITIC if critic else "") + "\n"


def force_prompt(critic: bool) -> str:
    """After a continue the model answered again without running anything: the paper's continue
    requires "at least one additional tool call" (the words here are ours: the paper's prompt
    figures are not in our copy of it)."""
    text = (
        "Wait, I have not run any code since I decided to verify. Before the final answer I will write a "
        "```python block that checks it, and answer only after its output."
    )
    return text + (" " + CRITIC if critic else "") + "\n"


def duplicate_prompt(output: str, call: int, critic: bool) -> str:
    text = (
        f"Not run: this block repeats call {call}, which returned: {_result_text(output)}. Running it again "
        "cannot change anything. Write a different, corrected block instead."
    )
    if critic:
        text += " First say in words what was wrong, then write the new block."
    return text


# -- the guard ----------------------------------------------------------------------------------------

Decision = Literal["commit", "safety stop", "continue", "replan", "force", "duplicate", "gate off"]


class GStepData(TypedDict, total=False):
    """The data of G-STEP's verdicts: at a final submission (``on_answer``) or on a duplicate block
    it skipped (``on_code``: no max_extra_turns, tool_calls_left, features, out_of_range). With the
    gate off only ``p_continue`` (None), ``decision`` ("gate off") and ``reason``."""

    p_continue: float | None  # None: no gate (records before "gate off" said decision "commit")
    tau: float
    extra_turns: int  # continues given so far (this one included)
    max_extra_turns: int
    tool_calls_left: int
    budget_frame: int  # the tool budget the gate was trained at: budget_remaining counts against it
    text_bins: str  # what the gate's 64 text bins hash: "reasoning" (the paper) or "final" (older gates)
    features: dict[str, float]  # the numeric features, rounded
    out_of_range: dict[str, OutOfRange] | None  # inputs far outside training (None: the file cannot tell)
    decision: Decision
    reason: str
    repeats_call: int  # a duplicate: the earlier call it repeats, and what that one printed
    previous_output: str


def gate_off(v: VerdictRecord) -> bool:
    """A verdict at a submission made with no gate (a record of any version: p is None only then)."""
    return v.hook == "on_answer" and verdict_data(v, GStepData).get("p_continue", 0.0) is None


def _weights_check(v: str) -> bool:
    return bool(str(v).strip())


class GStep(GuardBase):
    """G-STEP: a learned gate at each final submission -- continue with one more tool call, or commit."""

    name = "gstep"
    carries_state = True  # the continues given, the progress at the last one, the forcing prompt
    paper_reading = {"agreeing_check": False}
    order = 40
    main_settings = ("tau", "max_extra_turns", "critic", "force_call")
    summary = (("gate_continues", "gate cont"),)
    _STYLE = {
        "commit": "bold ok",
        "continue": "bold warn",
        "replan": "bold warn",
        "force": "bold warn",
        "duplicate": "bold warn",
        "safety stop": "bold accent",
    }

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        if gate_off(v):
            return GATE_OFF
        d = verdict_data(v, GStepData)
        p: float | None = d.get("p_continue")
        tau: float = d.get("tau", 0)
        decision: str = d.get("decision", v.action)
        far: dict[str, OutOfRange] | None = d.get("out_of_range")
        line = f"p(cont) {'n/a' if p is None else f'{p:.3f}'} / τ {tau:g} {decision}"
        return line + (" ⚠ out of range" if far else "")

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """At a submission: a card with p(continue) against tau (log scale), the decision, and a
        warning when an input lies outside the gate's training range; with the gate off, a card
        that says so and shows no number. A duplicate block it skipped: the reason, on that block."""
        d = verdict_data(v, GStepData)
        reason: str = d.get("reason", v.reason)
        if v.hook == "on_code" and v.action == SKIP:
            return Display("code-skip", text=reason)
        if v.hook != "on_answer":
            return super().display(v)
        if gate_off(v):
            return Display(
                "card",
                title="G-STEP",
                lines=((Span(GATE_OFF, "muted"),),),
                attempt=True,
                tooltip="weights = off: the gate is not consulted and never continues",
            )
        p: float | None = d.get("p_continue")
        tau: float | None = d.get("tau")
        decision: str = d.get("decision", v.action)
        far: dict[str, OutOfRange] | None = d.get("out_of_range")
        gate = (
            Span("p(continue) ", "muted"),
            Gauge(p, tau, lo=0.001, hi=1.0, log=True, above="warn", below="ok"),
            Span(f" {'n/a' if p is None else f'{p:.3f}'}", "bold"),
            Span(f"  τ {tau:g}" if tau is not None else "", "muted"),
            Span("  → ", "muted"),
            Span(decision, cls._STYLE.get(decision, "bold")),
        )
        lines: tuple[tuple[Span | Gauge, ...], ...] = (gate, (Span(f"reason: {reason or v.reason}", "muted"),))
        if far:
            lines += ((Span(f"⚠ outside the gate's training range: {range_words(far)}", "warn"),),)
        return Display(
            "card",
            title="G-STEP",
            lines=lines,
            attempt=True,
            flagged=bool(far),
            tooltip="p(continue) on a log scale from 0.001 to 1; the marker is tau",
        )

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, Any]:
        """``gate``: the decisions by kind; ``gate_continues``: the continues the gate gave, or
        GATE_OFF when every submission of the run met a gate that was off."""
        mine = run.of(cls.name)
        said = ["gate off" if gate_off(v) else verdict_data(v, GStepData).get("decision") for v in mine]
        decisions = [str(d) for d in said if d]
        gate = {d: decisions.count(d) for d in dict.fromkeys(decisions)}
        continues = sum(n for d, n in gate.items() if d in ("continue", "replan"))
        off = bool(decisions) and set(decisions) == {"gate off"}
        return {"gate": gate, "gate_continues": GATE_OFF if off else continues}

    @dataclass
    class Settings:
        tau: float = setting(
            0.05,
            "continue when P(continue) >= tau",
            check=lambda v: 0.0 <= v <= 1.0,
            allowed="0 <= tau <= 1",
            tag="paper",
        )
        max_extra_turns: int = setting(
            3,
            "commit once this many continues were given in the run",
            check=lambda v: v >= 0,
            allowed="an integer >= 0",
            tag="paper",
        )
        critic: bool = setting(
            False,
            "the +critic variant: prompts ask for the reasoning in words first, "
            "then the corrected block (a paper variant, off = plain gate)",
            tag="paper",
        )
        force_call: bool = setting(
            True,
            "a continue requires one more tool call: an answer given again with no new "
            "executed call gets one prompt that asks for a tool call (off: it "
            "commits at once as no progress, the earlier behaviour)",
            tag="paper",
        )
        agreeing_check: bool = setting(
            True,
            "commit, before the gate is asked, when a later call with different code agrees with the earlier "
            "answer (an independent check, not stagnation); the paper's gate decides alone (off)",
            tag="default",
        )
        range_sds: float = setting(
            4.0,
            "warn when a numeric input lies more than this many training sds from the "
            "gate's training mean (or differs from a value constant in training): by "
            "Chebyshev at most 1/16 of any distribution lies that far out",
            check=lambda v: v > 0,
            allowed="a number > 0",
            tag="default",
        )
        weights: str = setting(
            "auto",
            "the gate file: 'auto' = the gate shipped for the default model "
            f"({DEFAULT_GATE_MODEL}), 'off' = no gate (never continue; what a "
            "calibration writes when no tau helps), or a path to an .npz from "
            "guards.gstep.training",
            check=_weights_check,
            allowed="auto, off or a file path",
            tag="default",
        )

    def __init__(self, settings: Settings | None = None):
        self.settings = settings if settings is not None else self.Settings()
        self.gate: Gate | None = None
        self.gate_path: Path | None = None
        self._loaded_for: str | None = None
        self._load()
        self.extra_turns = 0  # continues given in this run
        self._at_continue: tuple[int, str] | None = None  # (successful calls, last output) at the last continue
        self._executed_at_continue = 0  # executed calls at the last continue
        self._forced = False  # the last continue's force prompt was given
        self._continued: str | None = None  # the answer that continue sent back
        self._last_p: float | None = None

    # -- weights -----------------------------------------------------------------------------------

    def _load(self) -> None:
        spec = str(self.settings.weights).strip()
        if spec == self._loaded_for:
            return
        if spec.lower() == "off":
            self.gate, self.gate_path = None, None
        else:
            path = shipped_weights() if spec.lower() == "auto" else Path(spec).expanduser()
            self.gate, self.gate_path = Gate.from_file(path), path
        self._loaded_for = spec

    # -- hooks -------------------------------------------------------------------------------------

    def on_answer(self, answer: str | None, view: RunView) -> Verdict:
        """At a final submission: ``answer`` is its \\boxed{} answer, None when it has none."""
        self._load()  # the settings may have changed mid-run
        s = self.settings
        if self.gate is None:
            return Verdict(
                COMMIT, reason=GATE_OFF, data=GStepData(p_continue=None, decision="gate off", reason=GATE_OFF)
            )
        inp = gate_input_from_view(view, self.gate.budget)
        numeric = numeric_features(inp)
        x = features(inp, self.gate.text_bins)
        p = float(self.gate.p_continue(x))
        self._last_p = p
        state = self._progress(view)
        data: GStepData = {
            "p_continue": round(p, 6),
            "tau": s.tau,
            "extra_turns": self.extra_turns,
            "max_extra_turns": s.max_extra_turns,
            "tool_calls_left": view.tool_calls_left,
            "budget_frame": self.gate.budget,
            "text_bins": self.gate.text_bins,
            "features": {k: round(v, 4) for k, v in numeric.items() if k in _SUMMARY},
            "out_of_range": self.gate.outside(x, s.range_sds),
        }
        executed = sum(c.executed for c in view.calls)
        safety = None
        if view.mode != "tool":
            safety = "no tool in this mode"
        elif view.tools_suspended:
            safety = "tools are suspended (PruneTIR): G-STEP never forces a tool call then"
        elif self._at_continue is not None and state == self._at_continue:
            if (
                s.force_call
                and not self._forced
                and executed == self._executed_at_continue
                and view.tool_calls_left > 0
            ):
                self._forced = True
                reason = "no tool call since the continue: one more tool-conditioned step is required"
                data.update({"decision": "force", "reason": reason})
                return Verdict(CONTINUE, reason=reason, text=force_prompt(s.critic), data=data)
            safety = "no progress since the last continue (same number and last value of successful outputs)" + (
                "; the forcing prompt was given" if self._forced else ""
            )
        elif s.agreeing_check and (check := self._agreeing_check(answer, view)) is not None:
            reason = f"an independent check (call {check}) agrees with the earlier answer"
            data.update({"decision": "commit", "reason": reason})
            return Verdict(COMMIT, reason=reason, data=data)
        elif self.extra_turns >= s.max_extra_turns:
            safety = f"{self.extra_turns} extra turns already spent (max {s.max_extra_turns})"
        elif view.tool_calls_left <= 0:
            safety = "the tool-call budget is used up"
        if safety is not None:
            data.update({"decision": "safety stop", "reason": safety})
            return Verdict(COMMIT, reason=safety, data=data)
        if p >= s.tau:
            stagnant = numeric["output_stagnation"] == 1.0 and self._repeated(view)
            decision: Decision = "replan" if stagnant else "continue"
            text = replan_prompt(view, s.critic) if stagnant else continue_prompt(view, s.critic)
            self.extra_turns += 1
            self._at_continue, self._executed_at_continue, self._forced = state, executed, False
            self._continued = answer
            reason = f"p(continue) {p:.3f} >= tau {s.tau}" + ("; the outputs stagnate" if stagnant else "")
            data.update({"extra_turns": self.extra_turns, "decision": decision, "reason": reason})
            return Verdict(CONTINUE, reason=reason, text=text, data=data)
        reason = f"p(continue) {p:.3f} < tau {s.tau}"
        data.update({"decision": "commit", "reason": reason})
        return Verdict(COMMIT, reason=reason, data=data)

    def on_code(self, code: str, view: RunView) -> Verdict | None:
        """After a continue, a block equal (normalised) to an earlier executed one is not run."""
        if self.extra_turns == 0:
            return None
        norm = normalise_code(code)
        for c in view.calls:
            if c.executed and normalise_code(c.code) == norm:
                reason = f"repeats call {c.call}"
                return Verdict(
                    SKIP,
                    reason=reason,
                    text=duplicate_prompt(c.output, c.call, self.settings.critic),
                    data=GStepData(
                        decision="duplicate",
                        reason=reason,
                        repeats_call=c.call,
                        previous_output=c.output[:200],
                        p_continue=self._last_p,
                        tau=self.settings.tau,
                        extra_turns=self.extra_turns,
                    ),
                )
        return None

    def _agreeing_check(self, answer: str | None, view: RunView) -> int | None:
        """After a continue: the call that independently confirmed the answer sent back, or None.
        Confirmed [ours]: the model gives the same answer again, and a successful call made since
        the continue, with code unlike every earlier call's, printed that answer's value last."""
        if (
            self._at_continue is None
            or answer is None
            or self._continued is None
            or not _same_answer(answer, self._continued)
        ):
            return None
        ok = [c for c in view.calls if c.executed and not (c.error or c.timed_out)]
        new = ok[self._at_continue[0] :]
        if not new or not _same_answer(answer, new[-1].output, last_number=True):
            return None
        earlier = {normalise_code(c.code) for c in view.calls if c.executed and c.call != new[-1].call}
        return new[-1].call if normalise_code(new[-1].code) not in earlier else None

    @staticmethod
    def _repeated(view: RunView) -> bool:
        """The last two successful outputs came from the same (normalised) code: equal outputs of
        different code are an independent check that agrees, not stagnation [ours]."""
        ok = [c for c in view.calls if c.executed and not (c.error or c.timed_out)]
        return len(ok) >= 2 and normalise_code(ok[-1].code) == normalise_code(ok[-2].code)

    @staticmethod
    def _progress(view: RunView) -> tuple[int, str]:
        ok = [c for c in view.calls if c.executed and not (c.error or c.timed_out)]
        return len(ok), norm_text(ok[-1].output) if ok else ""


def _same_answer(answer: str, other: str, *, last_number: bool = False) -> bool:
    """Two answers agree: equal values (the pred value of ``answer``; of ``other`` its pred value,
    or its last number with ``last_number``, as for a tool output), else equal normalised text."""
    a, b = answer_value(answer), value(other) if last_number else answer_value(other)
    if a is not None and b is not None:
        return same(a, b)
    return bool(norm_text(answer)) and norm_text(answer) == norm_text(other)


# The numeric features shown with each verdict.
_SUMMARY = set(NUMERIC_NAMES) - {"n_chunks_seen", "n_pred_evidence_ids", "evidence_coverage_ratio"}
