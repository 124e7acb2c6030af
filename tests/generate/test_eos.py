"""Where generation ends: at any id of the model's ``eos_token_id`` (an int or a list, Llama 3
instruct's ``<|eot_id|>`` beside ``<|end_of_text|>``), read where transformers' ``generate`` reads
it (generation_config.json first, else config.json), on both backends, checked against
transformers' own greedy ``generate`` on the same folder. A tiny random Llama
(tests/_llama_fixtures.py) whose free greedy run is known: the end ids are picked from it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import needed
from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.errors import RuntimeFailure
from attncli.generate.hf_decoder import end_of_text_ids, load_pretrained
from attncli.generate.run import Settings, generate

PROMPT = "a dog ran"  # its free greedy run writes 20 distinct ids in 24 steps
N = 24
runner = CliRunner()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    needed("torch")
    needed("transformers")
    from _llama_fixtures import build_decoder

    return build_decoder("llama", tmp_path_factory.mktemp("generate-eos") / "llama")


def hf_generate(directory: Path, ids: list[int], n: int, **kwargs) -> list[int]:
    """transformers' greedy ``generate`` on the folder as it is: its own end-of-text ids."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, pad_token_id=0, **kwargs)
    return [int(i) for i in out[0, len(ids):]]


@pytest.fixture(scope="module")
def free_run(llama_dir) -> tuple[list[int], list[int]]:
    """The prompt's ids and transformers' greedy N tokens after it, with no end-of-text id at all."""
    work = llama_dir.parent / "free"
    shutil.copytree(llama_dir, work)
    variant(work, config={"eos_token_id": None}, generation=None)
    prompt = load_pretrained(str(work)).encode(PROMPT).ids
    run = hf_generate(work, prompt, N)
    assert len(run) == N
    return prompt, run


def variant(directory: Path, config: dict | None = None, generation: dict | str | None = "keep") -> Path:
    """``directory`` with config.json's fields changed (None: removed) and generation_config.json
    kept ("keep"), removed (None), replaced by raw text (a str) or with its fields changed (a dict)."""
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in (config or {}).items():
        data.pop(key, None) if value is None else data.__setitem__(key, value)
    path.write_text(json.dumps(data), encoding="utf-8")
    gen = directory / "generation_config.json"
    if generation is None:
        gen.unlink(missing_ok=True)
    elif isinstance(generation, str) and generation != "keep":
        gen.write_text(generation, encoding="utf-8")
    elif isinstance(generation, dict):
        data = json.loads(gen.read_text(encoding="utf-8"))
        for key, value in generation.items():
            data.pop(key, None) if value is None else data.__setitem__(key, value)
        gen.write_text(json.dumps(data), encoding="utf-8")
    return directory


def copy(llama_dir: Path, tmp_path: Path, **changes) -> Path:
    work = tmp_path / "m"
    shutil.copytree(llama_dir, work)
    return variant(work, **changes)


def late_and_unused(run: list[int]) -> tuple[int, int]:
    """An id first written at step 5 or later of ``run``, and an id the run never writes."""
    late = next(t for k, t in enumerate(run) if k >= 5 and t not in run[:k])
    unused = next(i for i in range(3, 300) if i not in run)
    return late, unused


# -- where the ids are read ---------------------------------------------------------------------

@pytest.mark.parametrize("config, generation, want", [
    ({"eos_token_id": [7, 5]}, None, (7, 5)),                          # no generation_config.json: config.json's
    ({"eos_token_id": 7}, None, (7,)),
    ({"eos_token_id": 7}, {"eos_token_id": [9, 4, 9]}, (9, 4)),        # generation_config.json wins, each id once
    ({"eos_token_id": 7}, {"eos_token_id": None}, ()),                 # it has the file but no id: no end
    ({"eos_token_id": None, "text_config": {"eos_token_id": [3, 8]}}, None, (3, 8)),  # a decoder section's
    ({"eos_token_id": [-1, 6, 10**6]}, None, (6, 10**6)),              # -1 is "none"; an id past the vocabulary is kept, never written
    ({"eos_token_id": []}, None, ()),
], ids=["config-list", "config-int", "generation-config-wins", "generation-config-without", "text-config",
        "none-and-past", "empty"])
def test_the_end_ids_are_read_where_transformers_reads_them(config, generation, want, llama_dir, tmp_path):
    path = copy(llama_dir, tmp_path, config=config, generation=generation)
    assert end_of_text_ids(json.loads((path / "config.json").read_text()), path) == want


@pytest.mark.parametrize("generation, why", [
    ({"eos_token_id": "</s>"}, "generation_config.json: eos_token_id: '</s>' is not a token id"),
    ({"eos_token_id": [2, 2.5]}, "generation_config.json: eos_token_id: [2, 2.5] is not a token id"),
    ({"eos_token_id": True}, "generation_config.json: eos_token_id: true is not a token id"),
    ({"eos_token_id": [[2]]}, "generation_config.json: eos_token_id: [[2]] is not a token id"),
    ({"eos_token_id": -5}, "generation_config.json: eos_token_id: -5 is not a token id"),
    ({"pad_token_id": "x"}, "generation_config.json: pad_token_id: 'x' is not a token id"),
    ("not json {", "generation_config.json: it is not valid JSON"),
    ("[2]", "generation_config.json: it is not a JSON object"),
], ids=["text", "float", "bool", "nested", "negative", "pad", "not-json", "not-object"])
def test_a_damaged_generation_config_is_a_damaged_model(generation, why, llama_dir, tmp_path):
    """transformers refuses each of these values when it loads the folder (a float, a string, a
    bool); attn says which file and field (exit 1) instead of guessing."""
    path = copy(llama_dir, tmp_path, generation=generation)
    with pytest.raises(RuntimeFailure) as failed:
        load_pretrained(str(path))
    message = str(failed.value)
    assert message.startswith("damaged model: ") and why in message
    result = runner.invoke(app, ["generate", PROMPT, "--transformer", str(path), "-n", "2", "--greedy"])
    assert result.exit_code == 1 and "Traceback" not in result.output


# -- where generation stops: transformers' greedy generate on the same folder ----------------------

@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("where", ["config.json", "generation_config.json"])
def test_generation_stops_at_the_second_id_of_a_list(where, backend, llama_dir, free_run, tmp_path):
    prompt, run = free_run
    late, unused = late_and_unused(run)
    if where == "config.json":
        path = copy(llama_dir, tmp_path, config={"eos_token_id": [unused, late]}, generation=None)
    else:  # config.json names an id written early, which must not stop it: generation_config.json wins
        path = copy(llama_dir, tmp_path, config={"eos_token_id": run[0]},
                    generation={"eos_token_id": [unused, late]})
    want = hf_generate(path, prompt, N)
    assert want == run[: run.index(late) + 1] and len(want) < N  # transformers stops at the second id
    dec = load_pretrained(str(path), backend=backend)
    assert dec.model.backend == backend
    gen = generate(dec, PROMPT, Settings(n=N, greedy=True))
    assert gen.ids[: gen.prompt_length] == prompt
    assert [s.id for s in gen.steps] == want
    assert gen.stopped == "eos" and gen.steps[-1].eos and gen.steps[-1].index is None
    assert not any(s.eos for s in gen.steps[:-1])
    assert gen.ids[gen.prompt_length:] == want[:-1]  # the end id is not part of the text


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_ignore_eos_passes_over_every_id_of_the_list(backend, llama_dir, free_run, tmp_path):
    """--ignore-eos bans each end id, as transformers' min_new_tokens does: the same N tokens."""
    prompt, run = free_run
    late, unused = late_and_unused(run)
    early = run[2]  # the last id of the list: banning only the first ones would end the text at step 2
    path = copy(llama_dir, tmp_path, config={"eos_token_id": [unused, late, early]}, generation=None)
    want = hf_generate(path, prompt, N, min_new_tokens=N)
    assert len(want) == N and want[:2] == run[:2] and early not in want and late not in want
    gen = generate(load_pretrained(str(path), backend=backend), PROMPT, Settings(n=N, greedy=True, ignore_eos=True))
    assert [s.id for s in gen.steps] == want and gen.stopped == "length"


@pytest.mark.parametrize("eos", [[-1], [10**6], [-1, 10**6]], ids=["none", "past-the-vocabulary", "both"])
def test_ids_the_model_cannot_write_end_nothing(eos, llama_dir, free_run, tmp_path):
    """As in transformers (which warns for -1 and runs to the end): the whole run, and --ignore-eos
    bans no real token (the last id of the vocabulary for -1) and indexes nothing past it."""
    prompt, run = free_run
    path = copy(llama_dir, tmp_path, config={"eos_token_id": eos}, generation=None)
    assert hf_generate(path, prompt, N) == run
    for ignore in (False, True):
        gen = generate(load_pretrained(str(path)), PROMPT, Settings(n=N, greedy=True, ignore_eos=ignore))
        assert [s.id for s in gen.steps] == run and gen.stopped == "length"


def test_the_cli_says_the_model_ended_the_text(llama_dir, free_run, tmp_path):
    prompt, run = free_run
    late, unused = late_and_unused(run)
    path = copy(llama_dir, tmp_path, config={"eos_token_id": [unused, late]}, generation=None)
    result = runner.invoke(app, ["generate", PROMPT, "--transformer", str(path), "-n", str(N), "--greedy", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["stopped"] == "eos" and [s["id"] for s in doc["steps"]] == run[: run.index(late) + 1]
