import time

from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils import rewards

GOOD = [
    "<think>23 + 45 = 68</think><answer>68</answer>",
    "  <think>x</think><answer>7</answer>\n",              # outer whitespace is fine
    [{"role": "assistant", "content": "<think>1 + 1 = 2</think><answer>2</answer>"}],  # TRL chat shape
]
BAD_FORMAT = [
    "",                                                   # empty
    "68",                                                 # no tags
    "<answer>68</answer>",                                # no think
    "<think>23 + 45 = 68<answer>68",                      # unclosed
    "<answer>68</answer><think>23 + 45 = 68</think>",     # answer first
    "<think>a</think> text <answer>68</answer>",          # text between
    "<think>a</think><answer>68</answer> and more",       # trailing text
    "<think>a</think><answer>68</answer><answer>1</answer>",  # two answers
    "<think>a</think><answer></answer>",                  # empty answer
    None, 42, b"\xff\xfe", [], [{}], {"content": None},
]


def test_good_outputs_are_well_formatted():
    assert rewards.format_reward(GOOD) == [1.0] * len(GOOD)


def test_bad_outputs_are_not():
    assert rewards.format_reward(BAD_FORMAT) == [0.0] * len(BAD_FORMAT)


def test_accuracy_reward_compares_numbers():
    completions = ["<think>.</think><answer>68</answer>", "<answer> 68 </answer>", "<answer>068</answer>",
                   "<answer>69</answer>", "<answer>6 8</answer>", "<answer>sixty-eight</answer>", "68", None]
    assert rewards.accuracy_reward(completions, answer=["68"] * len(completions)) == [1, 1, 1, 0, 0, 0, 0, 0]


def test_parse_int():
    assert rewards.parse_int("1,024") == 1024 and rewards.parse_int("-7") == -7
    for bad in (None, "", "+", "1.5", "٣", "1e3", "9" * 40):
        assert rewards.parse_int(bad) is None


def test_extractors():
    text = "<think>23 + 45 = 68</think><answer>68</answer>"
    assert rewards.extract_think(text) == "23 + 45 = 68" and rewards.extract_answer(text) == "68"
    assert rewards.extract_answer("<answer>" + "1" * 100 + "</answer>") is None  # absurdly long


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.binary(), st.none(), st.integers(), st.lists(st.text()),
                 st.lists(st.dictionaries(st.text(), st.text()))))
def test_rewards_never_raise(completion):
    for fn in (rewards.format_reward, rewards.accuracy_reward):
        out = fn([completion], answer=["68"])
        assert len(out) == 1 and out[0] in (0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "68", " ", "x"]), max_size=40))
def test_rewards_on_tag_soup(parts):
    text = "".join(parts)
    assert rewards.format_reward([text])[0] in (0.0, 1.0)
    assert rewards.accuracy_reward([text], answer=["68"])[0] in (0.0, 1.0)


def _seconds(texts):
    start = time.perf_counter()
    rewards.format_reward(texts)
    rewards.accuracy_reward(texts, answer=["1"] * len(texts))
    return time.perf_counter() - start


def test_rewards_are_linear_time_on_hostile_input():
    """Ten times the input must cost about ten times the time (quadratic parsing would cost 100x)."""
    def hostile(n):
        return ["<think>" * n, "<answer>" + "9" * (4 * n), "</answer><answer>" * n + "<answer>1"]
    small, large = min(_seconds(hostile(3_000)) for _ in range(3)), min(_seconds(hostile(30_000)) for _ in range(3))
    assert large < 30 * small + 0.05, (small, large)
    assert _seconds(hostile(100_000)) < 10.0  # and a generous absolute bound: never hangs


def test_accuracy_reward_without_answers_is_a_clear_error():
    import pytest
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        rewards.accuracy_reward(GOOD)
    with pytest.raises(ValueError, match="answers"):
        rewards.accuracy_reward(GOOD, answer=["68"])
