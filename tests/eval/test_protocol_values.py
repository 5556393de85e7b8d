"""``--protocol VALUE[:KEY=VALUE,...]``: one grammar for a protocol's settings and its switches."""

import pytest

from tuiagent.errors import ConfigError
from tuiagent.eval.protocols import chosen, ran_protocols


def test_a_settings_value_adds_its_settings_once_and_a_switch_turns_its_options_on():
    picked = chosen(["tim", "cues:cue=cell+web_index", "attc-audit", "tim"])
    assert picked.values == ("tim", "cues", "attc-audit")
    assert picked.settings == ("cot", "full", "tim-prompt")
    assert picked.options == {"necessity": {"cues": ["cell", "web_index"]}, "attc": {"audit": True}}
    assert chosen(["cues"]).options == {"necessity": {"cues": ["cell", "usr_bin", "code"]}}  # the paper's code cues
    assert chosen([]) == chosen(())
    distractors = chosen(["tooltax", "distractors:types=thematic+hedged,model=qwen2.5-coder-0.5b"])
    assert distractors.options == {"tooltax": {"types": ["thematic", "hedged"], "model": "qwen2.5-coder-0.5b"}}
    assert chosen(["distractors"]).options["tooltax"]["types"] == ["thematic", "paraphrase", "parallel", "hedged"]


@pytest.mark.parametrize(
    "text, says",
    [
        ("nope", "unknown protocol 'nope'"),
        ("cues:colour=red", "--protocol cues has no key colour"),
        ("cues:cue=cell+nope", "unknown cue nope"),
        ("cues:cue", "'cue' is not KEY=VALUE"),
        ("tim:x=1", "--protocol tim takes no keys"),
        ("distractors:types=thematic+loud", "unknown distractor type loud"),
    ],
)
def test_a_bad_value_says_what_is_wrong_and_what_is_offered(text, says):
    with pytest.raises(ConfigError) as caught:
        chosen([text])
    assert says in str(caught.value)


def test_a_directory_written_when_an_eval_took_one_protocol_still_reads():
    assert ran_protocols({"protocol": "tim"}) == ["tim"]
    assert ran_protocols({"protocols": ["tim", "cues"], "protocol": "x"}) == ["tim", "cues"]
    assert ran_protocols({}) == []
