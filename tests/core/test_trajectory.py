"""Trajectory files are input too: a damaged one loads up to its last good event, with a warning
naming the file and line of each line skipped; a file that is not a trajectory, or is one from a
newer version, is refused with a message that says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuiagent.core import events as ev
from tuiagent.core.compare import pruned_parts, step_cells, summary
from tuiagent.core.context import working_context
from tuiagent.core.steps import run_metrics, steps
from tuiagent.core.trajectory import MAX_WARNINGS, Loaded, Recorder, TrajectoryError, load
from tuiagent.ui.describe import describe_event

GOLDEN = Path(__file__).resolve().parents[1] / "ui" / "data"
HEADER = json.dumps({"schema": ev.SCHEMA, "version": ev.SCHEMA_VERSION})


def event_lines(*events: ev.Event) -> list[str]:
    return [json.dumps(ev.to_dict(e)) for e in events]


def write(path: Path, lines: list[str], *, end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


NOTICE = ev.Notice(level="info", message="first", t=1.0)
LAST = ev.Notice(level="info", message="last", t=2.0)


def test_recorded_events_load_back_the_same(tmp_path):
    run = [
        ev.TurnStarted(turn=1, context_tokens=3),
        ev.TokenDelta(turn=1, text="a\u2028b\x85c", logprob=None),
        ev.ContextPruned(guard="g", keep=[0, 2]),
        ev.Notice(level="warning", message="caf\udce9"),
    ]
    with Recorder(tmp_path / "run.jsonl") as rec:
        for e in run:
            rec.write(e)
    # U+2028 and U+0085 are not line ends; a lone surrogate (from undecodable argv bytes) is kept
    assert load(tmp_path / "run.jsonl") == Loaded(run, [])


def test_a_run_that_ends_before_its_first_event_leaves_no_file(tmp_path):
    # a run cancelled before it began (the app's first start, a kernel that never came up) would list
    # as an empty run; a file that held a run before is kept as it is
    with Recorder(tmp_path / "never.jsonl"):
        pass
    assert not (tmp_path / "never.jsonl").exists()
    started = ev.Notice(level="info", message="started")
    with Recorder(tmp_path / "run.jsonl") as rec:
        rec.write(started)
    with Recorder(tmp_path / "run.jsonl"):  # reopened to append, nothing appended
        pass
    assert load(tmp_path / "run.jsonl").events == [started]


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{not json", "not valid JSON"),
        ('{"type": "Telepathy", "t": 1.0}', "unknown event type 'Telepathy'"),
        ('{"type": "Notice", "t": 1.0, "level": "info"}', "Notice without message"),
        ('{"type": "Notice", "t": 1.0, "level": "info", "message": 42}', "Notice.message should be str, not int"),
        (
            '{"type": "ContextPruned", "t": 1.0, "guard": "g", "keep": ["1"]}',
            "ContextPruned.keep should be list[int] | None",
        ),
        ("[1, 2]", "not an event object but list"),
    ],
)
def test_a_bad_line_in_the_middle_is_skipped_with_a_warning(tmp_path, bad, why):
    path = write(tmp_path / "run.jsonl", [HEADER, *event_lines(NOTICE), bad, *event_lines(LAST)])
    loaded = load(path)
    assert loaded.events == [NOTICE, LAST]
    assert len(loaded.warnings) == 1 and loaded.warnings[0].startswith(f"{path}:3: ") and why in loaded.warnings[0]


def test_a_line_that_is_not_utf8_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(
        b"\n".join([HEADER.encode(), b'{"type": "Notice", "message": "\xff"}', *map(str.encode, event_lines(LAST))])
    )
    assert load(path) == Loaded([LAST], [f"{path}:2: not UTF-8 text; line skipped"])


def test_a_line_cut_short_at_the_end_is_skipped_with_a_warning(tmp_path):
    path = write(tmp_path / "run.jsonl", [HEADER, *event_lines(NOTICE), event_lines(LAST)[0][:25]], end="")
    assert load(path) == Loaded([NOTICE], [f"{path}:3: cut short; line skipped"])


def test_blank_lines_are_not_damage(tmp_path):
    path = write(tmp_path / "run.jsonl", [HEADER, "", *event_lines(NOTICE), "  ", *event_lines(LAST)])
    assert load(path) == Loaded([NOTICE, LAST], [])


def test_many_bad_lines_are_named_up_to_a_limit_then_counted(tmp_path):
    path = write(tmp_path / "run.jsonl", [HEADER, *["oops"] * (MAX_WARNINGS + 7), *event_lines(LAST)])
    loaded = load(path)
    assert loaded.events == [LAST]
    assert [w.split(": ")[0] for w in loaded.warnings[:MAX_WARNINGS]] == [
        f"{path}:{n}" for n in range(2, 2 + MAX_WARNINGS)
    ]
    assert loaded.warnings[MAX_WARNINGS:] == [f"{path}: 7 more bad lines skipped"]


def test_a_newer_format_version_is_refused(tmp_path):
    path = write(tmp_path / "run.jsonl", [json.dumps({"schema": ev.SCHEMA, "version": ev.SCHEMA_VERSION + 1})])
    with pytest.raises(
        TrajectoryError, match=f"newer tuiagent \\(trajectory version {ev.SCHEMA_VERSION + 1}\\); upgrade"
    ):
        load(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty, not a trajectory"),
        (b"hello\n", "is not a tuiagent trajectory"),
        (b"[1, 2]\n", "is not a tuiagent trajectory"),
        (b'{"schema": "something.else"}\n', "is not a tuiagent trajectory"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is not a tuiagent trajectory"),
        (f'{{"schema": "{ev.SCHEMA}", "version": "2"}}\n'.encode(), "version '2' that is not a number"),
    ],
)
def test_a_file_that_is_not_a_trajectory_is_refused(tmp_path, content, message):
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(TrajectoryError, match=re.escape(message)):
        load(path)


def test_a_file_that_cannot_be_read_is_refused(tmp_path):
    for path in (tmp_path / "missing.jsonl", tmp_path):
        with pytest.raises(TrajectoryError, match="cannot read the trajectory"):
            load(path)


# -- any damage, property-tested ----------------------------------------------------------------

DAMAGE = st.one_of(
    st.just(("drop", None)),
    st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=30).filter(lambda b: b.strip() and b"\n" not in b)),
    st.tuples(st.just("cut"), st.floats(0, 0.99)),
    st.tuples(st.just("retype"), st.integers(0, 20)),
    st.tuples(st.just("unknown"), st.text(max_size=8)),
)


def damaged(line: bytes, kind: str, arg: object) -> bytes | None:
    """The line after one kind of damage (None: the line is gone)."""
    if kind == "drop":
        return None
    if kind == "garbage":
        return arg
    if kind == "cut":
        return line[: max(1, int(len(line) * arg))]
    data = json.loads(line)
    if kind == "unknown":
        data["type"] = f"Unknown{arg}"
    else:  # a field of the wrong type, whatever its declared one
        key = sorted(k for k in data if k != "type")[arg % (len(data) - 1)]
        data[key] = [[[]]]
    return json.dumps(data).encode()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["guarded.jsonl", "rtts.jsonl", "plain.jsonl"]), st.data())
def test_any_damage_keeps_every_good_line_and_the_views_still_fold(tmp_path_factory, name, data):
    source = GOLDEN / name
    good = load(source).events
    lines = source.read_bytes().split(b"\n")[:-1]
    structural = [i for i, e in enumerate(good, start=1) if not isinstance(e, ev.TokenDelta)]
    hits = data.draw(st.dictionaries(st.sampled_from(structural) | st.integers(1, len(lines) - 1), DAMAGE, max_size=8))
    out, expected, bad_lines = [lines[0]], [], []
    for i, line in enumerate(lines[1:], start=1):
        new = damaged(line, *hits[i]) if i in hits else line
        if new is None:
            continue
        out.append(new)
        if i in hits:
            bad_lines.append(len(out))
        else:
            expected.append(good[i - 1])
    path = tmp_path_factory.mktemp("damaged") / name
    path.write_bytes(b"\n".join(out) + b"\n")

    loaded = load(path)
    assert loaded.events == expected
    named = [int(w.split(": ")[0].rsplit(":", 1)[1]) for w in loaded.warnings[:MAX_WARNINGS]]
    assert named == bad_lines[:MAX_WARNINGS]
    assert len(loaded.warnings) == min(len(bad_lines), MAX_WARNINGS + 1)
    # what replay and compare show is folded from whatever survived
    events = loaded.events
    steps(events), step_cells(events), pruned_parts(events), summary(events), run_metrics(events, len)
    for i in range(len(events) + 1):
        working_context(events[:i])
    for e in events:
        describe_event(e)


def test_the_replay_bar_says_what_an_intervention_replaced_and_who_did_it():
    fault = ev.Intervention(
        target="output", by="person", turn=1, replaced="21536", replacement="", call=1, fault="error"
    )
    edit = ev.Intervention(target="text", by="person", turn=2, replaced="x", replacement="y", token=5)
    injected = ev.Intervention(
        target="output", by="protocol", turn=1, replaced="7", replacement="8", call=2, fault="wrong-number"
    )
    assert describe_event(fault) == "output of call 1 faulted (error) by a person"
    assert describe_event(edit) == "text from token 5 edited by a person"
    assert describe_event(injected) == "output of call 2 faulted (wrong-number) by the protocol"
