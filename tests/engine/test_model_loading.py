"""Any decoder-only causal LM with transformers' attention interface serves, not only
Llama; anything else is refused with a message that says why."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    BertConfig,
    BertModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from engine import Engine, EngineConfig, ModelLoadError, SamplingParams, load_model, model_runner
from tests.conftest import save_byte_tokenizer, save_model

PROMPTS = ["ROMEO: But soft, what light", "JULIET:\nO Romeo"]
MAX_NEW = 12


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> str:
    """Qwen2 differs from Llama where it matters here: biased q/k/v projections, its own RoPE base."""
    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.2, bos_token_id=None, eos_token_id=256, tie_word_embeddings=False)
    return save_model(Qwen2ForCausalLM(config), tmp_path_factory.mktemp("tiny_qwen2"))


def test_qwen2_greedy_output_matches_transformers_generate(tiny_qwen2):
    eng = Engine(EngineConfig(model=tiny_qwen2, block_size=4, num_gpu_blocks=32))
    ids = [eng.add_request(p, SamplingParams(max_tokens=MAX_NEW, ignore_eos=True)) for p in PROMPTS]
    eng.run()
    reference = AutoModelForCausalLM.from_pretrained(tiny_qwen2, attn_implementation="sdpa").eval()
    for rid, text in zip(ids, PROMPTS, strict=True):
        req = eng.requests[rid]
        prompt = torch.tensor([req.prompt_token_ids])
        expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=MAX_NEW,
                                      do_sample=False, eos_token_id=None, pad_token_id=0)[0, prompt.shape[1]:]
        assert req.prompt_token_ids == eng.loaded.tokenizer.encode(text)
        assert req.output_token_ids == expected.tolist()


def test_missing_folder_is_named_as_not_found(tmp_path):
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(ModelLoadError) as info:
        load_model(missing)
    assert missing in str(info.value) and "not found" in str(info.value)
    with pytest.raises(ValueError, match="not found"):  # what the lab catches, through the engine
        Engine(EngineConfig(model=missing))


def test_uncached_hub_id_on_an_offline_machine_fails_at_once_and_says_why(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not model_runner.hub_reachable()
    asked = []
    real = model_runner.AutoConfig.from_pretrained

    def from_pretrained(name, **kwargs):
        asked.append(kwargs["local_files_only"])
        return real(name, **kwargs)

    monkeypatch.setattr(model_runner.AutoConfig, "from_pretrained", from_pretrained)
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache and the hub cannot be reached"):
        load_model("no-such-org/no-such-model")
    assert asked == [True]  # the cache only: no network round trips and retries


def test_folder_without_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_bidirectional_encoder_is_refused(tmp_path):
    config = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    BertModel(config).save_pretrained(tmp_path)
    save_byte_tokenizer(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        load_model(str(tmp_path))
    assert str(tmp_path) in str(info.value) and "both directions" in str(info.value)
    assert "decoder-only causal" in str(info.value)


def test_encoder_decoder_is_refused(tmp_path):
    config = T5Config(vocab_size=300, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2)
    T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    save_byte_tokenizer(tmp_path)
    with pytest.raises(ModelLoadError, match="encoder-decoder"):
        load_model(str(tmp_path))


def test_model_whose_attention_cannot_be_paged_is_refused(tmp_path, monkeypatch):
    """A model class that does not route attention through AttentionInterface (as some older
    architectures in transformers do) cannot read its KV cache through block tables."""
    config = Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, eos_token_id=256)
    path = save_model(Qwen2ForCausalLM(config), tmp_path / "unpageable")
    monkeypatch.setattr(Qwen2ForCausalLM, "_supports_attention_backend", False)
    with pytest.raises(ModelLoadError) as info:
        load_model(path)
    assert path in str(info.value) and "cannot be paged" in str(info.value)


@pytest.mark.parametrize("file", ["tokenizer_config.json", "config.json"])
def test_a_folder_that_would_run_its_own_code_is_refused_by_name(tiny_llama, tmp_path, file):
    """Issue 32, case 2: a tokenizer_config.json with an auto_map made the CLI ask "run custom code?
    [y/N]" and run it on y. The lab never runs code from a model folder, and says so without asking."""
    import json
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "asks"
    shutil.copytree(tiny_llama, folder)
    data = json.loads((folder / file).read_text()) if (folder / file).exists() else {}
    data["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None], "AutoConfig": "evil.EvilConfig"}
    (folder / file).write_text(json.dumps(data))
    (folder / "evil.py").write_text("raise SystemExit('the folder ran its code')\n")
    with pytest.raises(ModelLoadError, match=f"its {file} names code of its own to run"):
        load_model(str(folder))
    cli = subprocess.run([sys.executable, "-m", "engine", "--model", str(folder), "--preset", "chat_mix"],
                         input="y\n", capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and "names code of its own to run" in cli.stderr
    assert "ran its code" not in cli.stdout + cli.stderr and "[y/N]" not in cli.stdout + cli.stderr
