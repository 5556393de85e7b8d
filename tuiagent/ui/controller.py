"""What the app knows and decides, apart from drawing it (no Textual here): its configuration, the
model's state, the presets on offer, what a fork or an edit runs under, an export's file, and every
error shown. The app (``tuiagent.ui.app``) composes screens and routes their messages to it; the
screens read it through ``tuiagent.ui.host.HostApp``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuiagent.backends.base import Backend
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import UserError
from tuiagent.presets import Preset
from tuiagent.ui.session import ModelSession

ModelState = tuple[str, str, str]  # (model id, idle/loading/ready/failed/crashed, a word beside it)


@dataclass(frozen=True)
class AppConfig:
    """What the app starts with. ``screen``: solve (default), replay (``replay`` file) or compare
    (``compare`` files, or a live comparison of ``columns``)."""

    model: str | None = None
    models_file: Path | None = None
    script: Path | None = None
    problem: str = ""
    gold: str | None = None
    # The guards on at the start and their settings, and the budgets, sampling, mode and kernel of every run.
    run_spec: RunSpec = field(default_factory=lambda: RunSpec(guards=("all",)))
    out: Path | None = None
    screen: str = "solve"
    replay: Path | None = None
    compare: tuple[Path, ...] = ()
    columns: tuple[str, ...] = ("none", "all")
    concurrent_columns: bool = False
    flush_s: float = 0.05
    sandbox: str = "auto"  # what kernel cells may do (kernels.sandbox)
    network: bool = False  # cells may use the network (--allow-network)
    confirm: bool = False  # ask before each code block runs (toggled with ctrl+k)
    raw_math: bool = False  # the model's LaTeX shown as written (toggled with f10)


# The fork dialog's first choice: keep the parent's guards and settings (then the fork repeats it exactly).
AS_RECORDED = "as recorded"


class AppController:
    """The app's state and decisions. ``on_model_state`` hears every change of the model's state
    (the app shows it in the top bar)."""

    def __init__(
        self,
        config: AppConfig,
        *,
        backend: Backend | None = None,
        backend_factory: Callable[[], Backend] | None = None,
        on_model_state: Callable[[ModelState], None] = lambda state: None,
    ):
        self.config = config
        self.session = ModelSession(config, backend=backend, backend_factory=backend_factory)
        self.errors: list[str] = []  # every error notice shown, for tests and the help screen
        self.pending: dict[str, Any] = {}  # files for a screen to open when it is shown
        self.on_model_state = on_model_state
        self.model_state: ModelState = ("", "idle", "")

    # -- the model ------------------------------------------------------------------------------

    def _set(self, state: str, error: str = "", word: str = "", model: str | None = None) -> None:
        self.session.set_state(state, error)
        self.model_state = (model or self.session.model_id, state, word)
        self.on_model_state(self.model_state)

    def start(self) -> None:
        """Read the model's entry (raises UserError: the model is then marked failed)."""
        try:
            self.session.resolve()
        except UserError as e:
            self._set("failed", str(e), "bad config", model=self.config.model or "?")
            raise
        self.model_state = (self.session.model_id, "idle", "")
        self.on_model_state(self.model_state)

    def needs_load(self) -> bool:
        """Mark the model ready, or loading and return True: the app then loads it in a thread.
        False too when it is loaded, loading, or failed."""
        s = self.session
        if s.state != "idle":
            return False
        if not s.needs_loading:
            self._set("ready")
            return False
        self._set("loading")
        return True

    def loaded(self) -> None:
        self._set("ready")

    def load_failed(self, why: str) -> None:
        self._set("failed", why)

    def refusal(self) -> str | None:
        """Why no run can start now (the model failed to load or crashed), or None."""
        return self.session.error if self.session.state in ("failed", "crashed") else None

    def crashed(self, events: Sequence[ev.Event]) -> str | None:
        """A run (its ``events``) ended because the shared model's process died: every later run would
        fail the same way, so the model is marked crashed; returns the crash's message (None: a
        per-run backend died alone, the next run opens another, or the crash is known already)."""
        s = self.session
        if not s.shared or s.state == "crashed":
            return None
        message = next((e.message for e in reversed(events) if isinstance(e, ev.Notice) and e.level == "error"), "")
        self._set("crashed", "the model crashed: press f5 to reload it", "f5 reloads")
        self.errors.append(f"the model crashed: {message}")
        return message

    def reloading(self) -> None:
        """At once, before the reload runs: no second reload, and the crash dialog closes."""
        self._set("loading")

    async def change_model(self, model_id: str | None) -> bool:
        """Close the model and open ``model_id`` (None: the default one), keeping the guard choices;
        False (and UserError raised) when its entry cannot be read; True when it is to be loaded."""
        old = self.session
        await old.aclose()
        self.config = replace(self.config, model=model_id)
        self.session = ModelSession(self.config)
        self.session.enabled, self.session.overrides = old.enabled, old.overrides  # keep the guard choices
        try:
            self.session.resolve()
        except UserError as e:
            self._set("failed", str(e))
            raise
        return self.needs_load()

    # -- presets and settings -------------------------------------------------------------------

    def presets(self) -> dict[str, Preset]:
        """The presets for the model in use (its calibration's ``recommended``, the user's), read
        afresh each time, so after a model switch they are the new model's."""
        from tuiagent.presets import load_presets

        model = self.session.spec.id if self.session.spec is not None else self.config.model
        return load_presets(model=model, models_file=self.config.models_file)

    def preset_choices(self) -> list[Preset]:
        """None, all and every preset for the model in use, as the preset dialogs list them."""
        return [Preset("none", RunSpec(guards=())), Preset("all", RunSpec(guards=("all",))), *self.presets().values()]

    def use_run_settings(self, spec: RunSpec) -> None:
        """The budgets, sampling, mode and kernel of ``spec`` for the next runs (a preset chosen in the
        app: those it does not give go back to their defaults); the guard choices are the panel's."""
        self.config = replace(self.config, run_spec=replace(spec, guards=(), guard_settings={}))
        self.session.config = self.config

    # -- forks and edits ------------------------------------------------------------------------

    @staticmethod
    def fork_step(parent: Path, value: str) -> tuple[int, Any]:
        """The step a typed ``value`` names in ``parent`` and the fork point after it (UserError: why not)."""
        from tuiagent.core.fork import fork_point
        from tuiagent.core.trajectory import load

        if not value.strip().isdigit():
            raise UserError(f"{value!r} is not a step number")
        at = int(value)
        return at, fork_point(load(parent).events, at, parent)

    def fork_choices(self, point: Any) -> list[Preset]:
        """What a fork at ``point`` may run under: the parent's settings first (it then repeats the
        parent exactly where nothing was edited), none, all and the presets (UserError: why not)."""
        from tuiagent.core.fork import guards_at

        guards, settings = guards_at(point)
        recorded = Preset(
            AS_RECORDED,
            RunSpec(guards=guards, guard_settings=settings),
            description="the parent's settings: only the edit differs"
            if point.edit
            else "the parent's settings: repeats its next step exactly",
        )
        return [recorded, *self.preset_choices()]

    @staticmethod
    def edit_point(parent: Path, target: Any, text: str) -> tuple[Any, tuple[str, str, int | None]]:
        """The fork point of ``parent`` with ``target`` (a core.fork.EditTarget) edited to ``text``,
        and the edit as a fork runs it: (target, replacement, the first token replaced or None)."""
        from tuiagent.core.fork import edit_point, text_edit
        from tuiagent.core.trajectory import load

        token, replacement = text_edit(target.tokens, text) if target.target == "text" else (None, text)
        point = edit_point(load(parent).events, target.step, target.target, replacement, token=token, path=parent)
        return point, (target.target, replacement, token)

    # -- export ---------------------------------------------------------------------------------

    @staticmethod
    def export(paths: list[Path], fmt: str, *, shade: bool, math: bool) -> Path:
        """Write the export of ``paths`` (one run, or a comparison) beside the first; its file."""
        from tuiagent.export import default_output, export_runs

        out = default_output(paths, fmt)
        out.write_text(export_runs(paths, fmt, shade=shade, math=math), encoding="utf-8")
        return out
