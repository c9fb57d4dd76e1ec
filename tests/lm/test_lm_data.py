"""TRL-compatible inputs: dataset files, reward functions with TRL's signature and weights, pretrained
policies by name or path, and the batch methods of the pretrained tokenizer (on the tiny GGUF of
tests/tiny_gguf.py: no download)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from longhorizon.errors import UsageError  # noqa: E402
from longhorizon.lm.data import RewardFunctions, import_function, load_dataset, prepare, read_rows  # noqa: E402
from longhorizon.lm.hf_tokenizer import from_gguf  # noqa: E402
from longhorizon.lm.policy import load_pretrained, resolve  # noqa: E402
from longhorizon.lm.tokenizer import Tokenizer  # noqa: E402

from tiny_gguf import write_gguf  # noqa: E402  (tests/tiny_gguf.py)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def tok(tiny):
    return from_gguf(tiny)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [{"prompt": "2+2=", "answer": "4"},
        {"prompt": [{"role": "user", "content": "hello"}], "answer": "5", "level": 2}]


def test_rows_from_jsonl_json_and_parquet(tmp_path):
    jsonl = write_jsonl(tmp_path / "d.jsonl", ROWS)
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    assert read_rows(jsonl) == ROWS == read_rows(tmp_path / "d.json")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    flat = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "d.parquet")
    assert read_rows(tmp_path / "d.parquet") == flat


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a"}\n{"answer": 1}\n', "line 2 of .* has no 'prompt' column"),
    ('{"prompt": "a"}\n\n{"prompt": \n', "line 3 of .* is not valid JSON"),
    ('{"prompt": [{"role": "user"}]}\n', "neither text nor a list"),
    ('{"prompt": ""}\n', "empty prompt"),
    ('[1, 2]\n', "line 1 of .* is a list, not an object"),
    ('\n', "has no rows"),
])
def test_malformed_datasets_are_refused_naming_the_row(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        read_rows(path)


def test_missing_or_unknown_dataset_files(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        read_rows(tmp_path / "none.jsonl")
    (tmp_path / "d.csv").write_text("prompt\nx\n")
    with pytest.raises(UsageError, match="convert it to JSONL"):
        read_rows(tmp_path / "d.csv")


def test_conversations_use_the_chat_template_and_columns_are_kept(tiny, tmp_path):
    tok = from_gguf(tiny)
    examples = load_dataset(write_jsonl(tmp_path / "d.jsonl", ROWS), tok)
    assert examples[0].prompt == "2+2=" and not examples[0].conversational
    assert examples[1].prompt == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert examples[1].columns == {"answer": "5", "level": 2} and examples[1].index == 1
    assert examples[0].horizon is None and prepare([{"prompt": "x", "horizon": 3}], tok)[0].horizon == 3
    with pytest.raises(UsageError, match="need a model with a chat template"):
        prepare(ROWS, Tokenizer())


def exact(prompts, completions, answer, **kwargs):
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [1.0 if t.strip() == a else 0.0 for t, a in zip(texts, answer)]


def short(prompts, completions, completion_ids, **kwargs):
    return [None if len(ids) == 0 else -0.1 * len(ids) for ids in completion_ids]


def test_reward_functions_trl_signature_weights_and_none(tiny):
    examples = prepare(ROWS, from_gguf(tiny))
    seen = {}

    def spy(prompts, completions, completion_ids, answer, level, **kwargs):
        seen.update(prompts=prompts, completions=completions, answer=answer, level=level)
        return [0.5, None]

    rewards = RewardFunctions([exact, short, spy], weights=[1.0, 2.0, 4.0])
    r, metrics = rewards(examples, ["4", " 5 "], [[7, 8], []])
    # row 0: exact 1, short -0.2 (x2), spy 0.5 (x4) = 1 - 0.4 + 2 = 2.6; row 1: exact 1, the others None = 1
    np.testing.assert_allclose(r, [2.6, 1.0])
    assert seen["prompts"] == [ROWS[0]["prompt"], ROWS[1]["prompt"]]
    assert seen["completions"] == ["4", [{"role": "assistant", "content": " 5 "}]]  # conversational stays conversational
    assert seen["answer"] == ["4", "5"] and seen["level"] == [None, 2]  # a column a row lacks is None
    assert metrics["rewards/exact/mean"] == 1.0 and metrics["rewards/short/mean"] == pytest.approx(-0.2)
    assert metrics["rewards/spy/std"] == 0.0


def test_bad_reward_functions_are_named(tiny):
    examples = prepare(ROWS, from_gguf(tiny))

    def raises(prompts, completions, **kwargs):
        raise KeyError("answer_key")

    def too_few(prompts, completions, **kwargs):
        return [1.0]

    def not_a_number(prompts, completions, **kwargs):
        return ["yes", 1.0]

    def nan(prompts, completions, **kwargs):
        return [math.nan, 1.0]

    for fn, message in ((raises, "reward function raises raised KeyError"), (too_few, "returned 1 values for 2"),
                        (not_a_number, "returned 'yes' for completion 0"), (nan, "returned nan")):
        with pytest.raises(UsageError, match=message):
            RewardFunctions([fn])(examples, ["a", "b"])
    with pytest.raises(UsageError, match="2 reward weights for 1"):
        RewardFunctions([exact], [1.0, 2.0])
    with pytest.raises(UsageError, match="no reward function"):
        RewardFunctions([])


def test_reward_functions_from_specs(tmp_path):
    assert import_function("math:sqrt") is math.sqrt
    (tmp_path / "my_rewards.py").write_text("def correct(prompts, completions, **kw):\n    return [1.0] * len(completions)\n")
    fn = import_function(f"{tmp_path / 'my_rewards.py'}:correct")
    assert fn(prompts=["p"], completions=["c"]) == [1.0]
    for spec, message in (("math.sqrt", "does not name a function"), ("no_such_module_x:f", "importing no_such_module_x failed"),
                          ("math:no_such", "has no function 'no_such'"), ("missing.py:f", "no file missing.py")):
        with pytest.raises(UsageError, match=message):
            import_function(spec)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="helo wrd12 é", min_size=0, max_size=12), min_size=1, max_size=5))
def test_encode_prompts_left_pads_and_marks_valid_by_length(tok, texts):
    tokens, valid = tok.encode_prompts(texts, 40)
    for row, v, text in zip(tokens, valid, texts):
        ids = tok.encode(text) or [tok.pad_id]
        assert v.sum() == len(ids) and v[-len(ids):].all()  # valid is a suffix, even where pad_id is a real token
        assert row[-len(ids):].tolist() == ids
        if text:
            assert tok.decode(row[v].tolist()) == text


def test_decode_batch_cuts_at_any_stop_id(tiny):
    tok = from_gguf(tiny)
    hello = tok.encode("hello")
    assert tok.eos_ids == (2, 0)
    ids = np.array([hello + [2] + hello, hello + [0, 0, 0, 0, 0, 0][: len(hello) + 1], [1] + hello + [2] * len(hello)])
    assert tok.decode_batch(ids) == ["hello", "hello", "hello"]  # <|im_start|> (1) is special: dropped
    with pytest.raises(UsageError, match="raise max_prompt_length"):
        tok.encode_prompts(["hello world"], 2)


def test_load_pretrained_by_path_and_refusals(tiny, tmp_path):
    policy = load_pretrained(tiny)
    assert policy.cfg.n_layers == 2 and policy.tokenizer.eos_ids == (2, 0) and policy.source == str(tiny)
    assert resolve("smollm2") == ("named", None)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(UsageError, match="is a longhorizon run, not a pretrained checkpoint"):
        resolve(run)
    with pytest.raises(UsageError, match="is no checkpoint"):
        resolve(tmp_path / "nothing")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"")
    with pytest.raises(UsageError, match="no tokenizer.json"):
        resolve(hf)

