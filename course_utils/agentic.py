"""A model that calls a tool: the chat format, the tool, and the multi-turn rollout of agentic RL (notebook 12).

The pieces TRL's ``GRPOTrainer(tools=...)`` needs from a model's tokenizer, made for the course's tiny Qwen3, and the
rollout loop written out so that its masks can be compared with TRL's own (``_tool_call_loop``):

* :data:`TOOL_TAGS` and :func:`add_tool_tokens`: ``<tool_call>`` … ``</tool_response>`` as whole, non-special tokens
  (as the course's think/answer tags are), the embeddings resized to match.
* :data:`TOOL_CHAT_TEMPLATE`: the course's chat template plus a system line listing the tools, an assistant turn that
  may hold tool calls (inside ``{% generation %}``, so SFT trains on them) and a tool turn that returns a result. A
  call is written compactly, ``<tool_call>calc(expr=23+45+67)</tool_call>`` (20 tokens, against about 50 for Qwen3's
  JSON): a model of 0.5M parameters has 256 positions.
* :data:`RESPONSE_TEMPLATE`: how ``tokenizer.parse_response`` reads a call back out of generated text (TRL raises at
  construction for a template it does not know, so the course sets its own); :func:`use_tool_format` installs both.
* :func:`calc`: the tool. It never raises and never hangs on any input: arithmetic only, read with ``ast`` (never
  ``eval``), inputs and results bounded; anything else returns ``"error"``.
* :func:`read_calls`, :func:`run_call`, :func:`tool_suffix_ids`, :func:`tool_rollout`: the loop itself — generate until
  the turn ends, run the calls it holds, append their results as the template writes them, continue, at most
  ``max_calls`` rounds — with the completion's **tool mask**: 0 on the tokens the tool wrote (the policy did not
  choose them), 1 on the model's. It follows TRL's ``_tool_call_loop`` rule for rule (calls read by TRL's parser
  wrapper, errors written as TRL writes them, the same budget and context rollbacks): greedy, on 16 rollouts of the
  cold-started tiny model, its ids and tool masks equal those of TRL's own generation batch (notebook 12 checks it).
* :func:`demo_row`, :func:`direct_row`, :func:`cold_start_rows`, :func:`prompt_rows`, :func:`answer_reward`,
  :func:`call_reward`, :func:`greedy_generate_fn`, :func:`evaluate_tool_use`, :func:`figures`: demonstrations with
  and without a call, GRPO rows, rewards that read the last assistant turn, and greedy accuracy with or without the
  tool; :func:`trl_rollouts`, :func:`rollout_batch`, :func:`logp_by_source` and :func:`no_tool_mask_class` for the
  comparison with TRL, the tool's log-probs and the run without the tool mask.
"""
from __future__ import annotations

import ast
import copy
import json
import operator
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

from .rewards import extract_answer

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TOOL_TAGS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)

# The course's template (modeling.CHAT_TEMPLATE) with tools: a system line "Tools: calc(expr)" when tools are given,
# an assistant turn whose tool calls are rendered name(key=value,...) inside the generation block, and the tool's
# result as a user turn wrapped in <tool_response>, the way Qwen3's template returns it. Each turn ends with the
# tokenizer's EOS (the course's is <|im_end|>; a model of your own keeps its own, where its generation stops).
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\nTools:' }}"
    "{%- for tool in tools %}{%- set f = tool.function if tool.function is defined else tool %}"
    "{{- ' ' + f.name + '(' + (f.parameters.properties | list | join(', ')) + ')' }}"
    "{%- endfor %}{{- eos_token + '\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\n' }}"
    "{%- generation %}"
    "{{- message['content'] if message['content'] is string else '' }}"
    "{%- for tc in message.get('tool_calls') or [] %}{%- set f = tc.function if tc.function is defined else tc %}"
    "{{- '<tool_call>' + f.name + '(' }}"
    "{%- for k, v in f.arguments.items() %}{{- (',' if not loop.first else '') + k + '=' + (v | string) }}"
    "{%- endfor %}{{- ')</tool_call>' }}"
    "{%- endfor %}"
    "{{- eos_token }}"
    "{%- endgeneration %}"
    "{{- '\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\n<tool_response>' + message['content'] + '</tool_response>' + eos_token + '\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + eos_token + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# transformers' response parser (tokenizer.parse_response, which TRL's tool loop calls): a call is
# <tool_call>name(k=v,...)</tool_call>; the text around calls is the content, joined (without "join" only the last
# piece would be kept). No <think> field, unlike Qwen3's parser: it would move the course's <think> block out of the
# content that the course's rewards read.
def response_template(eos_token: str) -> dict:
    """:data:`RESPONSE_TEMPLATE` for a tokenizer whose turns end with ``eos_token``."""
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {"open_pattern": r"<tool_call>(?P<name>\w+)\(", "close_pattern": r"\)</tool_call>\s*",
                           "repeats": True, "content": "kv-lines", "content_args": {"line_sep": ",", "kv_sep": "="},
                           "transform": {"type": "function",
                                         "function": {"name": "{name}", "arguments": "{content}"}}},
            "content": {"close_pattern": re.escape(eos_token) + r"\s*", "content": "text", "repeats": True,
                        "join": ""},
        },
    }


RESPONSE_TEMPLATE = response_template("<|im_end|>")   # the course tokenizer's (its EOS is <|im_end|>)

MAX_EXPRESSION_CHARS = 40
"""longer expressions are refused: the tool must stay fast on anything a policy writes"""
MAX_RESULT_ABS = 10 ** 12
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def add_tool_tokens(tokenizer, model=None) -> list[int]:
    """Add :data:`TOOL_TAGS` to ``tokenizer`` as whole, non-special tokens (a decoder that skips special tokens keeps
    them) and resize ``model``'s embeddings to match (new rows at the mean of the old). Returns the tags' ids.
    Adding them twice changes nothing."""
    from tokenizers import AddedToken
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TAGS])
    if model is not None and model.get_input_embeddings().weight.shape[0] != len(tokenizer):
        from .modeling import transformers_errors_only
        with transformers_errors_only():   # transformers announces the mean initialisation chosen here
            model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return tokenizer.convert_tokens_to_ids(list(TOOL_TAGS))


def use_tool_format(tokenizer) -> None:
    """Install :data:`TOOL_CHAT_TEMPLATE` and :data:`RESPONSE_TEMPLATE` on ``tokenizer`` (after
    :func:`add_tool_tokens`). Without a response template TRL's tool loop cannot see a call."""
    missing = [t for t in TOOL_TAGS if t not in tokenizer.get_vocab()]
    if missing:
        raise ValueError(f"the tool tags {missing} are not whole tokens yet: call add_tool_tokens first")
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = response_template(tokenizer.eos_token)


# --------------------------------------------------------------------------- the tool
def _evaluate(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
        if abs(value) > MAX_RESULT_ABS:
            raise ValueError("result too large")
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not integer arithmetic")


def calc(expr: str) -> str:
    """
    Evaluate an integer arithmetic expression with +, - and *.

    Args:
        expr: The expression, for example 23+45+67
    """
    if not isinstance(expr, str) or len(expr) > MAX_EXPRESSION_CHARS:
        return "error"
    try:
        with warnings.catch_warnings():   # "3a" is a SyntaxWarning before it is an error: the tool answers, not warns
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expr.strip(), mode="eval")
        return str(_evaluate(tree.body))
    except Exception:   # SyntaxError, ValueError, RecursionError, ...: any text a policy writes
        return "error"


def format_call(name: str, **arguments) -> str:
    """A call as the template writes it: ``format_call("calc", expr="23+45+67")`` ->
    ``<tool_call>calc(expr=23+45+67)</tool_call>``."""
    args = ",".join(f"{k}={v}" for k, v in arguments.items())
    return f"{TOOL_CALL_OPEN}{name}({args}){TOOL_CALL_CLOSE}"


def read_calls(tokenizer, ids: list[int], prefix: list[int]) -> list[tuple[str, dict]]:
    """The tool calls in one generated turn ``ids`` (``prefix``: the ids before it), read exactly as TRL's tool loop
    reads them: the tokenizer's response parser through TRL's wrapper (``trl.chat_template_utils.parse_response``),
    whose fallback makes text it cannot read as a call plain text, not a call. A call's arguments are whatever the
    parser found (missing ones as ``{}``), so ``calc(23+45+67)`` is the call ``calc()``, which fails when run."""
    from trl.chat_template_utils import parse_response
    if not ids:   # an empty turn (a budget already spent) holds no call; the parser would read [] as a batch
        return []
    calls = parse_response(tokenizer, list(ids), prefix=list(prefix)).get("tool_calls") or []
    return [(call["function"]["name"], call["function"].get("arguments") or {}) for call in calls]


def run_call(call: tuple[str, dict], tools: dict[str, Callable]) -> tuple[str, bool]:
    """Run one call: ``(result text, failed)``. An unknown tool, wrong arguments or a tool that raises is a failed
    call whose result is the error, written as TRL writes it (``{'error': '...'}``), never an exception here."""
    name, arguments = call
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        return str(tools[name](**arguments)), False
    except Exception as error:
        return str({"error": str(error)}), True


# --------------------------------------------------------------------------- the multi-turn rollout
def tool_suffix_ids(tokenizer, tool_messages: list[dict]) -> list[int]:
    """The ids the template puts between the end of an assistant turn and the next assistant turn when
    ``tool_messages`` are returned: rendered by difference, as TRL does, so the model's own tokens are never
    re-tokenised. For the course template and a result ``933``:
    ``"\\n<|im_start|>user\\n<tool_response>933</tool_response><|im_end|>\\n<|im_start|>assistant\\n"``."""
    dummy = [{"role": "user", "content": "x"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"type": "function", "function": {"name": m.get("name", "tool"), "arguments": {}}}
                 for m in tool_messages]}]
    before = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False)
    after = tokenizer.apply_chat_template(dummy + tool_messages, tokenize=True, add_generation_prompt=True,
                                          return_dict=False)
    before, after = list(before), list(after)
    last_eos = max(i for i, t in enumerate(before) if t == tokenizer.eos_token_id)
    before = before[:last_eos + 1]
    if after[:len(before)] != before:
        raise ValueError("the chat template does not render a tool result after the assistant turn it answers")
    return after[len(before):]


@dataclass
class ToolRollout:
    """One multi-turn completion.

    ``completion_ids``: every token after the prompt, the model's and the tool's; ``tool_mask``: 1 where the model
    wrote the token, 0 where the template and tool did (the loss must skip those); ``calls``, ``failed_calls``: tool
    calls run and how many failed; ``truncated``: the completion reached ``max_completion_length``.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    tool_mask: list[int] = field(default_factory=list)
    calls: int = 0
    failed_calls: int = 0
    truncated: bool = False


def tool_rollout(generate_fn: Callable[[list[list[int]], int], list[list[int]]], tokenizer,
                 prompt_ids: list[list[int]], tools: dict[str, Callable], *, max_completion_length: int,
                 max_calls: int = 1, max_positions: int | None = None) -> list[ToolRollout]:
    """The multi-turn rollout of agentic RL, for a batch of prompts.

    ``generate_fn(inputs, max_new_tokens)`` continues each id list of ``inputs`` (a model's greedy or sampled
    decoding; it returns the new ids only, ending at the turn's end token or at ``max_new_tokens``). Each round:
    generate; parse the new turn's calls; run them (:func:`run_call`); append the template's tool turn
    (:func:`tool_suffix_ids`: tool mask 0) and generate again from there (tool mask 1). At most ``max_calls``
    rounds run; a call written after the last round stays unrun text in the completion. A row whose next tool turn
    would not fit in ``max_completion_length`` (or would bring prompt and completion to ``max_positions``, the model's
    context) stops there, as TRL's loop stops it; the last turn is cut to fit.
    """
    rows = [ToolRollout(prompt_ids=list(p)) for p in prompt_ids]
    new = generate_fn([list(p) for p in prompt_ids], max_completion_length)
    for row, ids in zip(rows, new):
        ids = list(ids)[:max_completion_length]
        row.completion_ids, row.tool_mask = ids, [1] * len(ids)
        row.truncated = len(ids) >= max_completion_length and ids[-1:] != [tokenizer.eos_token_id]
    last_turn = {i: (row.prompt_ids, row.completion_ids) for i, row in enumerate(rows)}
    for _ in range(max_calls):
        pending = {}
        for i, (prefix, turn) in last_turn.items():
            row = rows[i]
            calls = read_calls(tokenizer, turn, prefix)
            if not calls:
                continue
            results = []
            for call in calls:
                text, failed = run_call(call, tools)
                row.calls += 1
                row.failed_calls += failed
                results.append({"role": "tool", "name": call[0], "content": text})
            suffix = tool_suffix_ids(tokenizer, results)
            too_long = len(row.completion_ids) + len(suffix) > max_completion_length
            if max_positions is not None:
                too_long |= len(row.prompt_ids) + len(row.completion_ids) + len(suffix) >= max_positions
            if too_long:
                row.truncated = True
                continue
            row.completion_ids = row.completion_ids + suffix
            row.tool_mask = row.tool_mask + [0] * len(suffix)
            pending[i] = max_completion_length - len(row.completion_ids)
        order = [i for i in sorted(pending) if pending[i] > 0]   # a row whose tool turn filled the budget ends there
        if not order:
            break
        outs = generate_fn([rows[i].prompt_ids + rows[i].completion_ids for i in order],
                           max(pending[i] for i in order))
        last_turn = {}
        for i, ids in zip(order, outs):
            ids = list(ids)[:pending[i]]
            row = rows[i]
            prefix = row.prompt_ids + row.completion_ids
            row.completion_ids = row.completion_ids + ids
            row.tool_mask = row.tool_mask + [1] * len(ids)
            row.truncated = len(row.completion_ids) >= max_completion_length and ids[-1:] != [tokenizer.eos_token_id]
            last_turn[i] = (prefix, ids)
    return rows


# --------------------------------------------------------------------------- data, rewards and evaluation
def demo_row(problem: dict) -> dict:
    """One SFT demonstration of using the tool: question -> call -> the tool's result -> ``<answer>``.

    ``tools`` holds the JSON schema TRL renders in GRPO (a JSON string: a data set cannot hold a function), so the
    system line the model is trained with is the one it will be prompted with.
    """
    from transformers.utils import get_json_schema
    expr = "+".join(map(str, problem["terms"]))
    call = {"type": "function", "function": {"name": "calc", "arguments": {"expr": expr}}}
    return {"messages": [{"role": "user", "content": problem["question"]},
                         {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "name": "calc", "content": calc(expr)},
                         {"role": "assistant", "content": f"<answer>{problem['answer']}</answer>"}],
            "tools": json.dumps([get_json_schema(calc)])}


def direct_row(problem: dict) -> dict:
    """A demonstration that answers directly, without calling the tool (the tools still listed): the habit of a
    model that never had one."""
    row = demo_row(problem)
    return {"messages": [row["messages"][0], {"role": "assistant", "content": f"<answer>{problem['answer']}</answer>"}],
            "tools": row["tools"]}


def fit_budget(recipe, tokenizer, problems: list[dict]):
    """``recipe`` with a completion budget that holds a demonstration in ``tokenizer``'s tokens.

    The longest of ``problems``' demonstrations (:func:`demo_row`: the call, the tool's turn and the answer, as the
    tool template renders them) rounded up to 16, and never below the recipe's own budget: 64 for the course's
    tokenizer (its longest is 55, so nothing changes there). A model of your own whose tokenizer splits
    ``<|im_start|>`` into bytes needs more room, or every answer after a call is cut off.
    """
    from dataclasses import replace
    tok = copy.deepcopy(tokenizer)
    add_tool_tokens(tok)
    use_tool_format(tok)
    longest = 0
    for problem in problems:
        row = demo_row(problem)
        prompt = tool_prompt_ids(tok, problem["question"])
        whole = tok.apply_chat_template(row["messages"], tools=[calc], tokenize=True, return_dict=False)
        longest = max(longest, len(whole) - len(prompt))
    return replace(recipe, max_completion_length=max(recipe.max_completion_length, -(-longest // 16) * 16))


def cold_start_rows(problems: list[dict], direct_share: float, seed: int) -> list[dict]:
    """Cold-start SFT rows: ``round(direct_share * n)`` of ``problems`` answered directly (:func:`direct_row`), the
    rest with a call (:func:`demo_row`), shuffled with ``seed``."""
    import random
    n_direct = round(direct_share * len(problems))
    rows = [direct_row(p) if i < n_direct else demo_row(p) for i, p in enumerate(problems)]
    random.Random(seed).shuffle(rows)
    return rows


def prompt_rows(problems: list[dict]) -> list[dict]:
    """``{"prompt": [user message], "answer"}`` rows for TRL's ``GRPOTrainer`` (conversational prompts: its tool
    loop needs messages)."""
    return [{"prompt": [{"role": "user", "content": p["question"]}], "answer": p["answer"]} for p in problems]


def final_answer(completion) -> str | None:
    """The ``<answer>`` of the last *assistant* message of a multi-turn completion, or None. Never the tool's
    message: its text holds the right number."""
    if isinstance(completion, (list, tuple)):
        said = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return extract_answer(said[-1].get("content") or "") if said else None
    return extract_answer(completion)


def answer_reward(completions, answer, **kwargs) -> list[float]:
    """1 for a right final answer, else 0 (TRL's reward protocol; never raises on a completion)."""
    return [1.0 if final_answer(c) == str(a) else 0.0 for c, a in zip(completions, answer)]


def call_reward(completions, **kwargs) -> list[float]:
    """A bad reward, for notebook 12's "what goes wrong": 1 per tool result in the completion, so it pays for
    calling the tool, not for the answer."""
    return [float(sum(isinstance(m, dict) and m.get("role") == "tool" for m in c))
            if isinstance(c, (list, tuple)) else 0.0 for c in completions]


def greedy_generate_fn(model, tokenizer, batch_size: int = 100) -> Callable[[list[list[int]], int], list[list[int]]]:
    """A ``generate_fn`` for :func:`tool_rollout`: greedy continuations (``model.generate``, left-padded batches), each
    cut after its first end-of-turn token."""
    import torch

    from .generation import _pad_and_stack, eos_token_ids, eval_mode
    stop, pad = eos_token_ids(tokenizer, model), tokenizer.pad_token_id   # the ids TRL stops and cuts at

    @torch.no_grad()
    def generate_fn(inputs: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        out = []
        with eval_mode(model):
            for start in range(0, len(inputs), batch_size):
                chunk = [torch.tensor([row]) for row in inputs[start:start + batch_size]]   # (1, T_i) each
                ids = _pad_and_stack(chunk, pad, left=True)
                mask = _pad_and_stack([torch.ones_like(row) for row in chunk], 0, left=True)
                new = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                                     max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=stop,
                                     pad_token_id=pad)[:, ids.size(1):].tolist()
                for row in new:
                    ends = [k for k, t in enumerate(row) if t in stop]
                    out.append(row[:ends[0] + 1] if ends else row)
        return out
    return generate_fn


def tool_prompt_ids(tokenizer, question: str, with_tool: bool = True) -> list[int]:
    """The chat prompt for ``question`` as ids, with the tool listed (``with_tool``) or not."""
    return list(tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                              tools=[calc] if with_tool else None, add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


def last_turn(tokenizer, row: ToolRollout) -> str:
    """The text of a rollout's last assistant turn (after the last tool result, if any)."""
    return tokenizer.decode(row.completion_ids, skip_special_tokens=False).split("<|im_start|>assistant\n")[-1]


def evaluate_tool_use(model, tokenizer, problems: list[dict], *, with_tool: bool = True, max_completion_length: int,
                      max_calls: int = 1) -> dict:
    """Greedy accuracy on ``problems`` with the calculator (``max_calls`` rounds of calls) or without it (the tool
    neither listed nor run). Pass the recipe's budget, as training uses it.

    Returns ``{"accuracy", "calls", "failed_calls", "called_share", "called_accuracy", "n", "correct", "rollouts"}``:
    calls and failed calls per problem, the share of problems with a call and the accuracy on those (NaN: none).
    """
    prompts = [tool_prompt_ids(tokenizer, p["question"], with_tool) for p in problems]
    rows = tool_rollout(greedy_generate_fn(model, tokenizer), tokenizer, prompts, {"calc": calc} if with_tool else {},
                   max_completion_length=max_completion_length, max_calls=max_calls if with_tool else 0,
                   max_positions=getattr(model.config, "max_position_embeddings", None))
    correct = [extract_answer(last_turn(tokenizer, r)) == p["answer"] for p, r in zip(problems, rows)]
    n = len(problems)
    called = [ok for ok, r in zip(correct, rows) if r.calls]
    return {"accuracy": sum(correct) / n, "calls": sum(r.calls for r in rows) / n,
            "failed_calls": sum(r.failed_calls for r in rows) / n,
            "called_share": len(called) / n, "called_accuracy": sum(called) / len(called) if called else float("nan"),
            "n": n, "correct": correct, "rollouts": rows}


def copying_skill(tokenizer, problems: list[dict], *, max_completion_length: int, max_calls: int = 1,
                  min_called_share: float = 0.1):
    """The skill a cold start must have before GRPO: a measure ``model -> float`` for
    :class:`~course_utils.training.CriterionCallback`.

    It is the share of ``problems`` (validation problems) answered right among those on which the model called the
    calculator, greedy: calls that copy the question's numbers into ``calc(expr=…)``. GRPO reinforces what the policy
    samples; calls with wrong numbers earn nothing, so there is nothing to reinforce. A model that calls on fewer than
    ``min_called_share`` of the problems scores 0 (a few lucky calls are no skill). Greedy decoding can understate a
    skill that sampling already shows: a model that seldom calls when greedy may call, and copy right, at temperature 1.
    """
    def measure(model) -> float:
        result = evaluate_tool_use(model, tokenizer, problems, max_completion_length=max_completion_length,
                                   max_calls=max_calls)
        if result["called_share"] < min_called_share:
            return 0.0
        return float(result["called_accuracy"])
    return measure


def figures(result: dict) -> dict:
    """The scalar figures of an :func:`evaluate_tool_use` result (for ``experiment.Runs.add``)."""
    return {k: result[k] for k in ("accuracy", "calls", "failed_calls", "called_share", "called_accuracy")}


def logp_by_source(logps, batch: dict, tokenizer) -> dict:
    """Mean per-token log-prob of a batch's completions (``logps``: ``(B, C)``, e.g. ``grpo.batch_logps``) split by
    who wrote the token: ``"model"`` (tool mask 1), ``"tool"`` (tool mask 0: the template's tool turn and the result)
    and ``"tool_digits"`` (the digits of the tool's result). ``batch``: TRL's layout (:func:`rollout_batch`)."""
    import torch
    mask = batch["completion_mask"].bool()
    tool = mask & (batch["tool_mask"] == 0)
    digits = torch.tensor([[t.isdigit() for t in tokenizer.convert_ids_to_tokens(row)]
                           for row in batch["completion_ids"].tolist()], dtype=torch.bool)
    parts = {"model": mask & (batch["tool_mask"] == 1), "tool": tool, "tool_digits": tool & digits}
    return {k: logps[m].mean().item() if m.any() else float("nan") for k, m in parts.items()}


# --------------------------------------------------------------------------- TRL's side, for comparison
def trl_rollouts(batch: dict) -> list[ToolRollout]:
    """The rows of a TRL generation batch (``grpo.trl_generation_batch`` on a ``GRPOTrainer`` with tools) as
    :class:`ToolRollout` s: each prompt without its left padding, each completion up to its mask's end, with TRL's
    ``tool_mask`` (all ones where TRL returned none), so that they compare with :func:`tool_rollout`'s."""
    rows = []
    tool_mask = batch.get("tool_mask")
    for i in range(batch["completion_ids"].size(0)):
        prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
        n = int(batch["completion_mask"][i].sum())
        ids = batch["completion_ids"][i][:n].tolist()
        mask = tool_mask[i][:n].tolist() if tool_mask is not None else [1] * n
        rows.append(ToolRollout(prompt_ids=prompt, completion_ids=ids, tool_mask=[int(m) for m in mask]))
    return rows


def no_tool_mask_class(base):
    """A subclass of the GRPO trainer class ``base`` that trains on the tool's tokens too: TRL's ``tool_mask`` is
    dropped from every batch and the loss's token count recounted over the whole completion. For notebook 12's
    measured mistake only; never train this way."""

    class NoToolMaskGRPOTrainer(base):
        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            if batch.pop("tool_mask", None) is not None:   # TRL counted only the model's tokens: count them all
                batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()
            return batch

    return NoToolMaskGRPOTrainer


def rollout_batch(rows: list[ToolRollout], pad_id: int) -> dict:
    """Rollouts as tensors in TRL's layout: ``prompt_ids``/``prompt_mask`` left-padded, ``completion_ids``/
    ``completion_mask``/``tool_mask`` right-padded (``tool_mask`` 1 on padding, as TRL pads it). With
    ``grpo.batch_logps`` it gives the per-token log-probs of the course's own rollouts."""
    import torch
    width_p = max(len(r.prompt_ids) for r in rows)
    width_c = max(len(r.completion_ids) for r in rows)
    out = {"prompt_ids": torch.full((len(rows), width_p), pad_id), "prompt_mask": torch.zeros(len(rows), width_p),
           "completion_ids": torch.full((len(rows), width_c), pad_id),
           "completion_mask": torch.zeros(len(rows), width_c), "tool_mask": torch.ones(len(rows), width_c)}
    for i, r in enumerate(rows):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        out["prompt_ids"][i, width_p - p:] = torch.tensor(r.prompt_ids)
        out["prompt_mask"][i, width_p - p:] = 1
        out["completion_ids"][i, :c] = torch.tensor(r.completion_ids, dtype=torch.long)
        out["completion_mask"][i, :c] = 1
        out["tool_mask"][i, :c] = torch.tensor(r.tool_mask, dtype=torch.float)
    for key in ("prompt_mask", "completion_mask", "tool_mask"):
        out[key] = out[key].long()
    return out
