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


def _seconds(texts, parse=None):
    start = time.perf_counter()
    if parse is not None:
        parse(texts)
    else:
        rewards.format_reward(texts)
        rewards.accuracy_reward(texts, answer=["1"] * len(texts))
    return time.perf_counter() - start


def _hostile(n):
    return ["<think>" * n, "<answer>" + "9" * (4 * n), "</answer><answer>" * n + "<answer>1"]


def _grows_linearly(parse, n):
    """Ten times the input costs under 30 times the time (quadratic parsing costs about 100x). The floor of
    2 ms only absorbs timer noise: at these sizes a quadratic parser's large input takes far longer than that."""
    small = min(_seconds(_hostile(n), parse) for _ in range(5))
    large = min(_seconds(_hostile(10 * n), parse) for _ in range(3))
    return large < 30 * small + 0.002, (small, large)


def test_rewards_are_linear_time_on_hostile_input():
    linear, times = _grows_linearly(None, 30_000)   # about 0.5 MB of tags per completion at the large size
    assert linear, times
    assert _seconds(_hostile(100_000)) < 10.0  # and a generous absolute bound: never hangs


def test_the_linear_time_check_catches_a_quadratic_parser():
    def quadratic(texts):   # rescans the prefix at every 97th character
        return [text.count("<", 0, i) for text in texts for i in range(0, len(text), 97)]
    linear, times = _grows_linearly(quadratic, 2_000)
    assert not linear, times


def test_accuracy_reward_without_answers_is_a_clear_error():
    import pytest
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        rewards.accuracy_reward(GOOD)
    with pytest.raises(ValueError, match="3 completions but 1 values"):
        rewards.accuracy_reward(GOOD, answer=["68"])


# --------------------------------------------------------------------------- the GRPO reward library (notebook 07)
import math  # noqa: E402
from fractions import Fraction  # noqa: E402

import pytest  # noqa: E402

ALL_REWARDS = [rewards.format_reward, rewards.tag_count_reward, rewards.accuracy_reward,
               rewards.tiered_answer_reward, rewards.language_consistency_reward, rewards.step_language_reward]


def _call_all(completions, answer="68", prompt="What is 23 plus 45?"):
    n = len(completions)
    return {fn.__name__: fn(completions, answer=[answer] * n, prompts=[prompt] * n) for fn in ALL_REWARDS}


@pytest.mark.parametrize("text, value", [
    ("68", 68), ("+68", 68), ("-7", -7), ("\u22127", -7), ("068", 68), ("68.0", 68), ("0.5", Fraction(1, 2)),
    (".5", Fraction(1, 2)), ("1/2", Fraction(1, 2)), ("\\frac{3}{4}", Fraction(3, 4)), ("\\dfrac{3}{4}", Fraction(3, 4)),
    ("\\boxed{42}", 42), ("$42$", 42), ("\\boxed{\\frac{1}{3}}", Fraction(1, 3)), ("1,024", 1024),
    ("1,234,567", 1234567), ("1{,}024", 1024), ("1e3", 1000), ("2.5E-1", Fraction(1, 4)),
    ("\uff16\uff18", 68), ("\u0666\u0668", 68), ("\u0968\u096a", 24), (12, 12),
])
def test_parse_number_reads_the_usual_notations(text, value):
    assert rewards.parse_number(text) == value


@pytest.mark.parametrize("text", [None, "", "x", "nan", "NaN", "inf", "-inf", "1e999", "1e101", "9" * 40, "1,2",
                                  "1/0", "1/2/3", "6 8", "sixty-eight", "68!", "--5", "1..2", True, [], "\\boxed{}"])
def test_parse_number_rejects_everything_else(text):
    assert rewards.parse_number(text) is None


def test_accuracy_is_mathematical_equality():
    completions = ["<answer>0.5</answer>", "<answer>1/2</answer>", "<answer>\\frac{1}{2}</answer>",
                   "<answer>\\boxed{0.50}</answer>", "<answer>0.51</answer>", "<answer>2/4</answer>"]
    assert rewards.accuracy_reward(completions, answer=["1/2"] * 6) == [1, 1, 1, 1, 0, 1]
    assert rewards.accuracy_reward(["<answer>\u0666\u0668</answer>", "<answer>\uff16\uff18</answer>"],
                                   answer=["68", 68]) == [1, 1]
    assert rewards.accuracy_reward(["<answer>yes</answer>", "<answer>no</answer>"], answer=["yes", "yes"]) == [1, 0]


def test_tiers_follow_the_seed_and_zero_is_safe():
    c = ["<answer>68</answer>", "<answer> 68 </answer>", "<answer>68.0</answer>", "<answer>72</answer>",
         "<answer>80</answer>", "<answer>100</answer>", "<answer>abc</answer>", "68", None, "<answer></answer>"]
    tiers = [rewards.answer_tier(x, "68") for x in c]
    assert tiers == ["exact", "equal", "equal", "within_10pct", "within_20pct", "wrong", "unparseable", "missing",
                     "missing", "missing"]
    assert rewards.tiered_answer_reward(c, answer=["68"] * len(c)) == [rewards.TIERS[t] for t in tiers]
    assert [rewards.answer_tier(f"<answer>{x}</answer>", "0") for x in ("0", "0.0", "0.01", "1")] == \
        ["exact", "equal", "wrong", "wrong"]


def test_tag_count_reward_is_the_seed_approximate_format():
    assert rewards.tag_count_reward(["<think>a</think><answer>1</answer>"]) == [2.0]
    assert rewards.tag_count_reward(["<think>a</think><answer>1</answer>"], count_think_open=False) == [1.5]
    assert rewards.tag_count_reward(["<think>a<answer>1</answer><answer>2</answer>"]) == [0.5 - 1 - 1 - 1]
    assert rewards.tag_count_reward([""]) == [-4.0]


def test_language_consistency_reward():
    out = rewards.language_consistency_reward(
        ["all english words", "mixed \u8fd9\u662f words", "\u5168\u662f\u4e2d\u6587", "12 + 3 = 15", ""],
        prompts=["What is 12 plus 3?"] * 5)
    assert out[0] == 1.0 and 0 < out[1] < 1 and out[2] == 0.0 and out[3] == 1.0 and out[4] == 1.0
    assert rewards.language_consistency_reward(["\u4e2d\u6587 ok"], prompts=[[{"role": "user", "content": "\u95ee\u9898"}]]) \
        == [2 / 4]
    assert rewards.language_consistency_reward(["abc"], target_script="CJK") == [0.0]
    # the format's tags are not the model's language
    assert rewards.language_consistency_reward(["<think>\u4e09\u52a0\u4e94 so</think><answer>8</answer>"],
                                               target_script="LATIN") == [2 / 5]
    # only the chain of thought counts, as in R1: letters in the answer block are not scored
    assert rewards.language_consistency_reward(["<think>so</think><answer>\u516b</answer>"],
                                               target_script="LATIN") == [1.0]
    assert rewards.language_consistency_reward(["<think>\u4e09 so<answer>x</answer>"], target_script="LATIN") == [2 / 3]
    assert rewards.language_consistency_reward(["ab \u4e09<answer>\u516b\u516b</answer>"],
                                               target_script="LATIN") == [2 / 3]
    with pytest.raises(ValueError, match="prompts"):
        rewards.language_consistency_reward(["abc"])


@pytest.mark.parametrize("fn", [rewards.accuracy_reward, rewards.tiered_answer_reward])
def test_missing_reference_column_is_a_clear_error(fn):
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        fn(["<answer>1</answer>"])


def test_tags_are_configurable_for_the_capstone():
    seed_style = "<start_working_out>2 + 2 = 4<end_working_out><SOLUTION>4</SOLUTION>"
    fmt, acc = (rewards.with_tags(f, rewards.SEED_TAGS) for f in (rewards.format_reward, rewards.accuracy_reward))
    assert fmt.__name__ == "format_reward" and acc.__name__ == "accuracy_reward"   # TRL logs rewards by name
    assert fmt([seed_style]) == [1.0] and acc([seed_style], answer=["4"]) == [1.0]
    assert rewards.format_reward([seed_style]) == [0.0]
    assert rewards.tag_count_reward([seed_style], tags=rewards.SEED_TAGS, count_think_open=False) == [1.5]


HOSTILE = st.one_of(
    st.text(max_size=300), st.binary(max_size=100), st.none(), st.integers(), st.floats(),
    st.lists(st.text(max_size=50), max_size=3),
    st.lists(st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(max_size=200)}), max_size=2),
    st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "68", "nan", "inf", "1e999", "-",
                              "1/0", "\\boxed{", "}", "9" * 30, "\u0666", "\uff18", " ", "x"]), max_size=30).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(HOSTILE, st.sampled_from(["68", "0", "-3", "1/2", "1,024", "abc"]))
def test_every_reward_is_finite_and_fast_on_any_output(completion, answer):
    start = time.perf_counter()
    out = _call_all([completion], answer=answer)
    assert time.perf_counter() - start < 0.5
    for name, values in out.items():
        assert len(values) == 1 and isinstance(values[0], float) and math.isfinite(values[0]), (name, values)


@settings(max_examples=500, deadline=None)
@given(st.integers(-10**12, 10**12).filter(lambda v: v != 0), st.text(alphabet="abc 0123456789+=,", max_size=40))
def test_reward_ordering_correct_close_wrong_missing(value, think):
    """For any reference and any think text: correct > close > wrong > missing."""
    close = value + max(1, abs(value) // 20) * (1 if value > 0 else -1)        # within 10%, or 1 off for |v| < 20
    wrong = value * 3 + (1000 if value > 0 else -1000)                     # off by more than 200%
    texts = [f"<think>{think}</think><answer>{v}</answer>" for v in (value, close, wrong)] + [f"<think>{think}</think>"]
    tiered = rewards.tiered_answer_reward(texts, answer=[str(value)] * 4)
    acc = rewards.accuracy_reward(texts, answer=[str(value)] * 4)
    assert tiered[0] > tiered[2] > tiered[3] and tiered[0] > tiered[1] >= tiered[2]
    if abs(value) >= 20:
        assert tiered[1] > tiered[2]
    assert acc == [1.0, 0.0, 0.0, 0.0]


def test_hostile_inputs_named_in_the_issue():
    hostile = ["", None, "x" * 100_000, "<think>" * 20_000 + "<answer>1</answer>",
               "<think><think>a</think></think><answer><answer>1</answer></answer>", "<answer>nan</answer>",
               "<answer>inf</answer>", "<answer>1e999</answer>", "<answer>" + "9" * 5000 + "</answer>",
               "<answer>" + "9" * 20 + "</answer>", [{"role": "assistant", "content": None}], float("nan")]
    slowest = 0.0
    for h in hostile:
        start = time.perf_counter()
        out = _call_all([h])
        slowest = max(slowest, time.perf_counter() - start)
        assert all(math.isfinite(v[0]) for v in out.values())
    assert slowest < 1.0, slowest


def test_agrees_with_trl_think_format_reward_where_semantics_meet():
    """TRL's think_format_reward checks only the think block; ours also needs the answer block.
    Where ours says well formatted, TRL's agrees; on completions that differ only in the think block, they agree."""
    from trl.rewards import think_format_reward
    thinks = ["a", "23 + 45 = 68", "", "multi\nline", "<think>nested", "x</think>y", "<answer>"]
    for think in thinks:
        text = f"<think>{think}</think><answer>68</answer>"
        ours = rewards.format_reward([text])[0]
        theirs = think_format_reward([[{"content": text}]])[0]
        if ours == 1.0:
            assert theirs == 1.0, text
        if "<" not in think:
            assert ours == theirs == 1.0
    for text in ["<answer>68</answer>", "no tags", "<think>unclosed<answer>68</answer>", " <think>x</think>"]:
        assert rewards.format_reward([text])[0] == 0.0 and think_format_reward([[{"content": text}]])[0] == 0.0


# --------------------------------------------------------------------------- the R1 pipeline's rewards (notebook 08)
@pytest.mark.parametrize("text, share", [
    ("<think>3 + 5 = 8, 2 + 3 + 0 = 5, so 58</think><answer>58</answer>", 1.0),
    ("<think>3 + 5 = 9, so 59</think><answer>59</answer>", 1.0),             # wrong steps are still steps
    ("<think>Ben went to the library, 3 + 5 = 8, so 58</think>", 2 / 3),   # prose leaks in
    ("<think><think>3 + 5 = 8, so 58</think>", 0.5),                        # a doubled tag is not a step
    ("<think>3 +  = 8</think>", 0.0),                                       # a broken equation
    ("<think>, ,</think>", 0.0), ("<think></think>", 0.0), ("<answer>58</answer>", 0.0), ("", 0.0), (None, 0.0),
])
def test_step_language_share(text, share):
    assert rewards.step_language_share(text) == pytest.approx(share)
    assert rewards.step_language_reward([text]) == [pytest.approx(share)]


def test_step_language_share_on_the_data_sets_completions():
    from course_utils.data import load_jsonl
    assert all(rewards.step_language_share(p["completion"]) == 1.0 for p in load_jsonl("arithmetic", "train", n=500))


def test_with_prefix_puts_the_prompts_opening_tag_back():
    completion = "3 + 5 = 8, 2 + 3 + 0 = 5, so 58</think><answer>58</answer>"
    fmt = rewards.with_prefix(rewards.format_reward, "<think>")
    acc = rewards.with_prefix(rewards.accuracy_reward, "<think>")
    assert rewards.format_reward([completion]) == [0.0] and fmt([completion]) == [1.0]
    assert acc([completion], answer=["58"]) == [1.0] and acc([None], answer=["58"]) == [0.0]
    assert fmt.__name__ == "format_reward" and acc.__name__ == "accuracy_reward"   # TRL logs rewards by name
    chat = [[{"role": "assistant", "content": completion}]]
    assert fmt(chat) == [1.0]
    with pytest.raises(ValueError, match="remove_unused_columns"):
        acc([completion])
