"""The tool format, the calculator and the from-scratch multi-turn rollout (course_utils.agentic)."""
import copy
import json

import pytest

from course_utils import agentic


@pytest.fixture()
def tool_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)   # the session's tokenizer stays as the other tests expect it
    agentic.add_tool_tokens(tok)
    agentic.use_tool_format(tok)
    return tok


@pytest.mark.parametrize("text", ["347+586", " 12 * 3 - 4 ", "-5+2"])
def test_calc_does_integer_arithmetic(text):
    assert agentic.calc(text) == str(eval(text))   # the test may eval its own constants; the tool never does


@pytest.mark.parametrize("text", ["", "abc", "__import__('os')", "2**10", "1/0", "9" * 60, "(" * 30 + "1" + ")" * 30,
                                  "99999999*99999999*99999", "1.5+2", None, 12, "1+", "[1]"])
def test_calc_never_raises_on_what_a_policy_writes(text):
    assert agentic.calc(text) == "error"


def test_tool_tags_are_whole_non_special_tokens(tool_tokenizer):
    for tag in agentic.TOOL_TAGS:
        ids = tool_tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tool_tokenizer.decode(ids, skip_special_tokens=True) == tag


def test_add_tool_tokens_resizes_the_model_once(tokenizer):
    from course_utils import modeling
    tok = copy.deepcopy(tokenizer)
    model = modeling.build_model(tok, seed=0)
    ids = agentic.add_tool_tokens(tok, model)
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == len(tokenizer) + 4
    assert agentic.add_tool_tokens(tok, model) == ids and len(tok) == len(tokenizer) + 4


def test_the_template_renders_a_call_and_its_result_and_trains_only_the_assistant(tool_tokenizer):
    call = {"type": "function", "function": {"name": "calc", "arguments": {"expr": "347+586"}}}
    chat = [{"role": "user", "content": "What is 347 plus 586?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "calc", "content": "933"},
            {"role": "assistant", "content": "<answer>933</answer>"}]
    text = tool_tokenizer.apply_chat_template(chat, tools=[agentic.calc], tokenize=False)
    assert text.startswith("<|im_start|>system\nTools: calc(expr)<|im_end|>\n")
    assert "<tool_call>calc(expr=347+586)</tool_call><|im_end|>" in text
    assert "<|im_start|>user\n<tool_response>933</tool_response><|im_end|>" in text
    out = tool_tokenizer.apply_chat_template(chat, tools=[agentic.calc], tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True)
    trained = tool_tokenizer.decode([t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m])
    assert trained == "<tool_call>calc(expr=347+586)</tool_call><|im_end|><answer>933</answer><|im_end|>"


def test_trl_accepts_the_format(tool_tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling
    assert supports_tool_calling(tool_tokenizer)
    assert is_chat_template_prefix_preserving(tool_tokenizer)


def test_the_response_parser_reads_calls_back(tool_tokenizer):
    prompt = tool_tokenizer.apply_chat_template([{"role": "user", "content": "What is 347 plus 586?"}],
                                                add_generation_prompt=True, tokenize=True, return_dict=False)
    ids = tool_tokenizer("<tool_call>calc(expr=347+586)</tool_call><|im_end|>", add_special_tokens=False)["input_ids"]
    parsed = tool_tokenizer.parse_response(ids, prefix=list(prompt))   # what TRL's loop calls
    call = {"type": "function", "function": {"name": "calc", "arguments": {"expr": "347+586"}}}
    assert parsed["tool_calls"] == [call]


def test_read_calls_reads_what_the_parser_reads(tool_tokenizer):
    tok = tool_tokenizer
    prefix = agentic.tool_prompt_ids(tok, "What is 1 plus 2?")
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]
    assert agentic.read_calls(tok, ids("<tool_call>calc(expr=1+2)</tool_call><|im_end|>"), prefix) == [
        ("calc", {"expr": "1+2"})]
    assert agentic.read_calls(tok, ids("<tool_call>calc(1+2)</tool_call><|im_end|>"), prefix) == [("calc", {})]
    for text in ["<answer>3</answer><|im_end|>", "<tool_call>oops</tool_call><|im_end|>", ""]:
        assert agentic.read_calls(tok, ids(text), prefix) == []          # plain text, as TRL's loop reads it
    # a call cut off by the budget is still read (the parser streams): TRL's loop would run it too
    assert agentic.read_calls(tok, ids("<tool_call>calc("), prefix) == [("calc", {})]
    two = "a<tool_call>calc(expr=1+2)</tool_call>b<tool_call>calc(expr=3)</tool_call><|im_end|>"
    assert agentic.read_calls(tok, ids(two), prefix) == [("calc", {"expr": "1+2"}), ("calc", {"expr": "3"})]
    assert agentic.format_call("calc", expr="1+2") == "<tool_call>calc(expr=1+2)</tool_call>"


def test_run_call_turns_every_failure_into_a_failed_call():
    tools = {"calc": agentic.calc, "boom": lambda: 1 / 0}
    assert agentic.run_call(("calc", {"expr": "2+3"}), tools) == ("5", False)
    assert agentic.run_call(("calc", {"expr": "x"}), tools) == ("error", False)   # the tool answered, with an error
    assert agentic.run_call(("nope", {}), tools) == ("{'error': 'Tool nope not found.'}", True)   # TRL's text
    for call in [("calc", {}), ("calc", {"wrong": "1"}), ("boom", {})]:
        text, failed = agentic.run_call(call, tools)
        assert failed and text.startswith("{'error': ")


def _scripted(tok, turns):
    """A generate_fn that answers each call from a queue of texts per row (keyed by the prompt's first id list)."""
    queues = [list(t) for t in turns]
    calls = {"n": 0}

    def generate_fn(inputs, max_new_tokens):
        calls["n"] += 1
        out = []
        for ids in inputs:
            row = next(i for i, q in enumerate(queues) if ids[:len(prompts[i])] == prompts[i])
            text = queues[row].pop(0)
            out.append(tok(text, add_special_tokens=False)["input_ids"][:max_new_tokens])
        return out
    prompts = []
    return generate_fn, prompts, calls


def test_rollout_masks_the_tool_tokens_and_caps_the_calls(tool_tokenizer):
    tok = tool_tokenizer
    prompt = lambda q: tok.apply_chat_template([{"role": "user", "content": q}], tools=[agentic.calc],
                                               add_generation_prompt=True, tokenize=True, return_dict=False)
    turns = [["<tool_call>calc(expr=347+586)</tool_call><|im_end|>", "<answer>933</answer><|im_end|>"],
             ["<answer>12</answer><|im_end|>"],
             ["<tool_call>calc(expr=1+1)</tool_call><|im_end|>", "<tool_call>calc(expr=2+2)</tool_call><|im_end|>"],
             ["<tool_call>calc(1+1)</tool_call><|im_end|>", "<answer>2</answer><|im_end|>"]]
    generate_fn, prompts, calls = _scripted(tok, turns)
    prompts += [list(prompt(f"question {i}")) for i in range(4)]
    rows = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=96, max_calls=1)
    a, b, c, d = rows
    # row a: call, tool turn (mask 0), answer (mask 1)
    text = tok.decode(a.completion_ids)
    assert text == ("<tool_call>calc(expr=347+586)</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>933"
                    "</tool_response><|im_end|>\n<|im_start|>assistant\n<answer>933</answer><|im_end|>")
    tool_text = tok.decode([t for t, m in zip(a.completion_ids, a.tool_mask) if not m])
    assert tool_text == "\n<|im_start|>user\n<tool_response>933</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert len(a.tool_mask) == len(a.completion_ids) and (a.calls, a.failed_calls) == (1, 0)
    # row b: no call, all the model's
    assert set(b.tool_mask) == {1} and b.calls == 0
    # row c: the second call is past the cap (max_calls=1): it stays unrun text, the rollout ends
    assert c.calls == 1 and tok.decode(c.completion_ids).endswith("<tool_call>calc(expr=2+2)</tool_call><|im_end|>")
    # row d: a call without its argument's name fails (calc() is missing expr) and the rollout goes on
    assert (d.calls, d.failed_calls) == (1, 1)
    assert "<tool_response>{'error': " in tok.decode(d.completion_ids)
    assert calls["n"] == 2   # one generation per round, for the rows that called a tool


def test_rollout_stops_a_row_whose_tool_turn_would_not_fit(tool_tokenizer):
    tok = tool_tokenizer
    generate_fn, prompts, _ = _scripted(tok, [["<tool_call>calc(expr=347+586)</tool_call><|im_end|>"]])
    prompts.append([1, 2, 3])
    first = len(tok("<tool_call>calc(expr=347+586)</tool_call><|im_end|>", add_special_tokens=False)["input_ids"])
    (row,) = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=first + 5)
    assert row.truncated and row.calls == 1 and len(row.completion_ids) == first and set(row.tool_mask) == {1}


def test_rollout_respects_the_context_and_a_full_budget(tool_tokenizer):
    tok = tool_tokenizer
    turn = "<tool_call>calc(expr=347+586)</tool_call><|im_end|>"
    first = len(tok(turn, add_special_tokens=False)["input_ids"])
    suffix = len(agentic.tool_suffix_ids(tok, [{"role": "tool", "name": "calc", "content": "933"}]))
    generate_fn, prompts, calls = _scripted(tok, [[turn]])
    prompts.append([1, 2, 3])
    (row,) = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=200,
                             max_positions=3 + first + suffix)   # the tool turn would reach the model's context
    assert row.truncated and set(row.tool_mask) == {1} and calls["n"] == 1
    generate_fn, prompts, calls = _scripted(tok, [[turn]])
    prompts.append([1, 2, 3])
    (row,) = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=first + suffix)
    assert row.tool_mask == [1] * first + [0] * suffix and calls["n"] == 1   # no generation of 0 new tokens


def test_rewards_read_the_last_assistant_turn_never_the_tool():
    done = [{"role": "assistant", "content": "", "tool_calls": []}, {"role": "tool", "name": "calc", "content": "933"},
            {"role": "assistant", "content": "<answer>933</answer>"}]
    cut = done[:2]                                   # the post-tool turn was truncated away: the tool's text is last
    wrong = done[:2] + [{"role": "assistant", "content": "<answer>932</answer>"}]
    assert agentic.answer_reward([done, cut, wrong, "<answer>933</answer>", None, 42], ["933"] * 6) == [
        1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert agentic.final_answer(cut) is None
    assert agentic.call_reward([done, done[:1], "text", None]) == [1.0, 0.0, 0.0, 0.0]


def test_demo_rows_render_with_the_schema_grpo_prompts_with(tool_tokenizer):
    import json
    problem = {"question": "Add 47, 86 and 12.", "terms": [47, 86, 12], "answer": "145"}
    row = agentic.demo_row(problem)
    text = tool_tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
    prompt = tool_tokenizer.decode(agentic.tool_prompt_ids(tool_tokenizer, problem["question"]))
    assert text.startswith(prompt.removesuffix("<|im_start|>assistant\n"))
    assert "<tool_call>calc(expr=47+86+12)</tool_call>" in text
    assert text.endswith("<tool_response>145</tool_response><|im_end|>\n<|im_start|>assistant\n"
                         "<answer>145</answer><|im_end|>\n")
    assert agentic.prompt_rows([problem]) == [{"prompt": [{"role": "user", "content": problem["question"]}],
                                               "answer": "145"}]


def test_greedy_generate_fn_stops_at_the_end_of_the_turn(tool_tokenizer):
    from course_utils import modeling
    model = modeling.build_model(tool_tokenizer, seed=0)
    generate_fn = agentic.greedy_generate_fn(model, tool_tokenizer, batch_size=2)
    prompts = [agentic.tool_prompt_ids(tool_tokenizer, q) for q in ("What is 1 plus 2?", "Add 3 and 4.", "x")]
    out = generate_fn(prompts, 7)
    assert len(out) == 3 and all(1 <= len(o) <= 7 for o in out)
    eos = tool_tokenizer.eos_token_id
    assert all(eos not in o[:-1] for o in out) and model.training   # cut after the first end; mode restored
    ev = agentic.evaluate_tool_use(model, tool_tokenizer, [{"question": "What is 1 plus 2?", "answer": "3"}] * 2,
                                   max_completion_length=8, max_calls=1)
    assert ev["n"] == 2 and 0 <= ev["accuracy"] <= 1 and len(ev["rollouts"]) == 2


def test_rollout_batch_and_trl_rollouts_round_trip(tool_tokenizer):
    tok = tool_tokenizer
    turns = [["<tool_call>calc(expr=347+586)</tool_call><|im_end|>", "<answer>933</answer><|im_end|>"],
             ["<answer>12</answer><|im_end|>"]]
    generate_fn, prompts, _ = _scripted(tok, turns)
    prompts += [agentic.tool_prompt_ids(tok, "What is 347 plus 586?"), agentic.tool_prompt_ids(tok, "Add 1 and 2.")]
    rows = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=96)
    batch = agentic.rollout_batch(rows, tok.pad_token_id)
    assert batch["completion_ids"].shape == batch["tool_mask"].shape == batch["completion_mask"].shape
    assert batch["prompt_mask"][1, 0] == 0 or len(prompts[1]) == len(prompts[0])   # prompts padded on the left
    assert batch["tool_mask"][1].tolist() == [1] * batch["tool_mask"].size(1)      # no call: every token the model's
    back = agentic.trl_rollouts(batch)
    assert [(r.prompt_ids, r.completion_ids, r.tool_mask) for r in back] == \
           [(r.prompt_ids, r.completion_ids, r.tool_mask) for r in rows]
    # the loss mask is zero exactly on the tool's tokens
    loss_mask = (batch["completion_mask"] * batch["tool_mask"])[0]
    tool_text = tok.decode([t for t, m in zip(rows[0].completion_ids, loss_mask.tolist()) if not m])
    assert tool_text == "\n<|im_start|>user\n<tool_response>933</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_no_tool_mask_class_drops_the_mask_and_recounts_the_tokens():
    import torch

    class Base:
        accelerator = type("Acc", (), {"gather": staticmethod(lambda t: t)})()

        def _generate_and_score_completions(self, inputs):
            mask = torch.tensor([[1, 1, 1, 0]])
            tool = torch.tensor([[1, 0, 1, 1]])
            return {"completion_mask": mask, "tool_mask": tool, "num_items_in_batch": (mask * tool).sum()}

    batch = agentic.no_tool_mask_class(Base)()._generate_and_score_completions(None)
    assert "tool_mask" not in batch and int(batch["num_items_in_batch"]) == 3



def test_cold_start_rows_mix_direct_answers_and_calls(tool_tokenizer):
    problems = [{"question": f"What is {a} + 60 + 40?", "terms": [a, 60, 40], "answer": str(a + 100)}
                for a in range(10, 18)]
    rows = agentic.cold_start_rows(problems, 0.75, seed=0)
    calls = [r for r in rows if any(m.get("tool_calls") for m in r["messages"])]
    assert len(rows) == 8 and len(calls) == 2
    direct = [r for r in rows if r not in calls]
    assert all(r["messages"][-1]["content"] == f"<answer>{int(r['messages'][0]['content'].split()[2]) + 100}</answer>"
               for r in direct)
    text = tool_tokenizer.apply_chat_template(direct[0]["messages"], tools=json.loads(direct[0]["tools"]),
                                              tokenize=False)
    assert text.startswith("<|im_start|>system\nTools: calc(expr)") and "<tool_call>" not in text
    assert agentic.cold_start_rows(problems, 0.75, seed=0) == rows


def test_logp_by_source_splits_the_model_the_tool_and_its_digits(tool_tokenizer):
    import math

    import torch
    tok = tool_tokenizer
    generate_fn, prompts, _ = _scripted(tok, [["<tool_call>calc(expr=347+586)</tool_call><|im_end|>",
                                               "<answer>933</answer><|im_end|>"]])
    prompts.append(agentic.tool_prompt_ids(tok, "What is 347 plus 586?"))
    rows = agentic.tool_rollout(generate_fn, tok, prompts, {"calc": agentic.calc}, max_completion_length=96)
    batch = agentic.rollout_batch(rows, tok.pad_token_id)
    tokens = tok.convert_ids_to_tokens(rows[0].completion_ids)
    logps = torch.tensor([[-1.0 if m else (-5.0 if t.isdigit() else -3.0)
                           for t, m in zip(tokens, rows[0].tool_mask)]])
    parts = agentic.logp_by_source(logps, batch, tok)
    assert parts["model"] == -1.0 and parts["tool_digits"] == -5.0 and -5.0 < parts["tool"] < -3.0
    ev = {"accuracy": 0.5, "calls": 1.0, "failed_calls": 0.0, "called_share": 0.0, "called_accuracy": math.nan,
          "n": 2, "correct": [True, False], "rollouts": rows}
    assert set(agentic.figures(ev)) == {"accuracy", "calls", "failed_calls", "called_share", "called_accuracy"}



def test_the_tool_format_ends_turns_with_a_foreign_tokenizers_eos():
    """A model of your own keeps its EOS (``</s>`` here): the tool turns end with it, where its generation stops,
    and the result's ids and a call are read as for the course's tokenizer (12 at full scale relies on it)."""
    from course_utils import adapt
    from course_utils.modeling import family_model
    model, tok = family_model("llama")
    adapt.adapt(model, tok)
    agentic.add_tool_tokens(tok, model)
    agentic.use_tool_format(tok)
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"expr": "1+2"}}}]},
        {"role": "tool", "name": "calc", "content": "3"}]
    text = tok.apply_chat_template(chat, tokenize=False, tools=[agentic.calc])
    assert "<|im_end|>" not in text and "<tool_call>calc(expr=1+2)</tool_call></s>" in text
    suffix = tok.decode(agentic.tool_suffix_ids(tok, [{"role": "tool", "name": "calc", "content": "3"}]))
    assert suffix == "\n<|im_start|>user\n<tool_response>3</tool_response></s>\n<|im_start|>assistant\n"
    prefix = tok.apply_chat_template(chat[:1], add_generation_prompt=True, return_dict=False)
    ids = tok("<tool_call>calc(expr=1+2)</tool_call></s>", add_special_tokens=False)["input_ids"]
    assert agentic.read_calls(tok, ids, list(prefix)) == [("calc", {"expr": "1+2"})]


def test_fit_budget_keeps_the_courses_and_makes_room_for_a_foreign_tokenizer(tokenizer):
    from course_utils import adapt, data, recipes
    from course_utils.modeling import family_model
    from course_utils.run_config import get_profile
    recipe = recipes.recipe_for("agentic", get_profile("cpu-tiny"))
    problems = data.load_jsonl("tool_arithmetic", "train")[:300]
    assert agentic.fit_budget(recipe, copy.deepcopy(tokenizer), problems) == recipe        # 64 holds the course's
    model, tok = family_model("llama")
    adapt.adapt(model, tok)
    wider = agentic.fit_budget(recipe, tok, problems).max_completion_length
    assert wider > recipe.max_completion_length and wider % 16 == 0
    assert "<tool_call>" not in tok.get_vocab()                    # measured on a copy: the tokenizer is untouched
