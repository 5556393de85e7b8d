"""One line about an event, for the replay bar (no UI code)."""

from __future__ import annotations

from tuiagent.core import events as ev
from tuiagent.core.compare import intervention_label, shown, verdict_note


def describe_event(e: ev.Event) -> str:
    match e:
        case ev.RunStarted():
            return f"run started · {e.model_id} · {e.mode} mode"
        case ev.TurnStarted():
            return f"turn {e.turn} starts · the model sees {e.context_tokens} context tokens"
        case ev.TurnEnded():
            return f"turn {e.turn} ended ({e.stop}) · {e.tokens} tokens"
        case ev.CodeBlock():
            first = e.code.strip().splitlines()[0] if e.code.strip() else ""
            return f"code block · call {e.call} · {first[:60]}"
        case ev.ToolResult():
            state = (
                "not run"
                if not e.executed
                else "timed out"
                if e.timed_out
                else f"error {e.error_name or ''}".strip()
                if e.error
                else "ok"
            )
            return f"tool result · call {e.call} · {state} · {e.duration_s * 1000:.0f} ms"
        case ev.GuardVerdict():
            return f"{e.guard} · {e.action} · {verdict_note(e).text}"
        case ev.GuardToggled():
            return f"{e.guard} switched {'on' if e.enabled else 'off'} · {e.reason}"
        case ev.ContextAppended():
            return f"context += {e.kind} from {e.source} · {len(e.text)} chars"
        case ev.ContextPruned():
            what = f"kept segments {e.keep}" if e.keep is not None else f"truncated to {e.truncate_to} segments"
            return f"{e.guard} pruned the context · {what} · {len(e.removed_text)} chars removed"
        case ev.AnswerAttempt():
            return f"answer {'(final)' if e.final else 'attempt'} · {e.answer}"
        case ev.Notice():
            return f"{e.level}: {e.message}"
        case ev.Intervention():
            return f"{intervention_label(e)} by {'a person' if e.by == 'person' else 'the ' + e.by}"
        case ev.RunFinished():
            right = {True: " · right", False: " · wrong", None: ""}[e.correct]
            return f"run finished · {e.reason} · answer {e.answer}{right}"
    return e.type


def is_guard_decision(e: ev.Event) -> bool:
    """What 'jump to the next guard decision' stops at: a verdict that says something, a prune, a switch."""
    if isinstance(e, ev.GuardVerdict):
        return shown(e)
    return isinstance(e, (ev.ContextPruned, ev.GuardToggled)) and not (
        isinstance(e, ev.GuardToggled) and e.reason == "on at start"
    )
