import json

from transformers import AutoModelForCausalLM, AutoTokenizer

from course_utils import adapt
from course_tools import base_model
from course_utils.modeling import family_model


def test_a_course_size_family_model_has_the_course_models_shape_and_splits_digits():
    model, tokenizer = family_model("llama", size="course")
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (4, 96, 4)
    assert tokenizer.pad_token is None and tokenizer.chat_template is None
    assert [tokenizer.decode([t]) for t in tokenizer("1234", add_special_tokens=False)["input_ids"]] == list("1234")
    assert "<answer>" not in tokenizer.get_vocab()            # it never saw the course's tags as tokens


def test_pretrain_family_model_saves_a_base_model_once(tmp_path):
    folder = base_model.pretrain_family_model("llama", tmp_path / "llama", seed=3, steps=4)
    info = json.loads((folder / "base_model.json").read_text())
    assert info["family"] == "llama" and info["recipe"]["steps"] == 4 and info["parameters"] > 100_000
    assert len(info["validation_loss"]) >= 1
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.pad_token is None and tokenizer.chat_template is None and tokenizer.eos_token == "</s>"
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert adapt.parameter_count(str(folder)) == info["parameters"] <= adapt.SMALL_MODEL_PARAMETERS
    built = (folder / "model.safetensors").stat().st_mtime_ns
    assert base_model.pretrain_family_model("llama", folder, seed=3, steps=4) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == built        # same inputs: not trained again
    base_model.pretrain_family_model("llama", folder, seed=3, steps=5)
    assert json.loads((folder / "base_model.json").read_text())["recipe"]["steps"] == 5   # other inputs: rebuilt
