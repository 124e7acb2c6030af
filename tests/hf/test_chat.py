"""A stranger's chat template is rendered within bounds (attncli.hf.text.chat): a loop that
would run for hours, a string of gigabytes made by ``*``, ``+``, ``%``, ``~`` in a namespace, a
filter, a method or a macro, or a render longer than a prompt's, each ends in a damaged-model
message (exit 1) naming the bound, before the text reaches the tokenizer; ordinary templates render
as before.
"""

from __future__ import annotations

import shutil
from pathlib import Path
import json

import pytest

from conftest import needed
from attncli.errors import RuntimeFailure
from attncli.hf.text import chat

needed("jinja2")

# each bomb, and what stops it (before the value is made: a render never holds gigabytes)
BOMBS = {
    "nested loops": ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "steps"),
    "nested loops writing": ("{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}",
                             "steps"),
    "repeat": ("{{ 'ab ' * 30000000 }}", "repeats a value to 90,000,000 items"),
    "repeat a list": ("{{ ([1] * 900000000)|length }}", "repeats a value"),
    "power": ("{{ 2 ** 999999999 }}", "power of more than 4,096 bits"),
    "doubling namespace": ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                           "{% endfor %}{{ ns.s|length }}", "makes a value of 1,048,576 items"),
    "doubling plus": ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}{{ ns.s|length }}", "makes a value of 1,048,576 items"),
    "doubling macro": ("{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('ab') }}", "makes a value of 1,048,576"),
    "center": ("{{ 'a'|center(999999999) }}", "passes the number 1e+09"),
    "ljust": ("{{ 'a'.ljust(999999999) }}", "passes the number 1e+09"),
    "replace filter": ("{{ ('a' * 1000)|replace('a', 'b' * 1000)|replace('b', 'c' * 1000) }}",
                       "values of 1,000,000 and 1,000 items"),
    "replace method": ("{{ ('a' * 1000).replace('a', 'b' * 1000).replace('b', 'c' * 1000) }}",
                       "values of 1,000,000 and 1,000 items"),
    "join filter": ("{{ range(100000)|join(',' * 1000) }}", "values of 100,000 and 1,000 items"),
    "join method": ("{{ (',' * 1000).join(range(2000)|map('string')) }}", "values of 2,000 and 1,000 items"),
    "format width": ("{{ '{:>999999999}'.format('a') }}", "a width or precision of a million"),
    "percent width": ("{{ '%999999999s' % 'a' }}", "a width or precision of a million"),
    "format filter": ("{{ '%999999999s'|format('a') }}", "a width or precision of a million"),
    "long render": ("{% for i in range(900) %}{{ messages[0]['content'] * 1 }}{{ 'y' * 2000 }}{% endfor %}",
                    "renders more than 1,000,010 characters"),
}
PEAK = 64 * 2**20  # bytes a bomb's render may hold at its peak (traced by tracemalloc)


@pytest.fixture
def folder(tmp_path) -> Path:
    return tmp_path


def rendered(folder: Path, template: str, prompt: str = "hello") -> str:
    (folder / "chat_template.jinja").write_text(template)
    return chat.render(folder, "m", prompt)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_template_past_a_bound_is_a_damaged_model_stopped_by_that_bound(folder, name):
    import tracemalloc

    template, why = BOMBS[name]
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeFailure, match=r"damaged model 'm': its chat template ") as caught:
            rendered(folder, template)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert why in str(caught.value)
    assert peak < PEAK, f"{peak / 2**20:.0f} MiB held"


def test_the_wall_clock_bounds_a_render(folder, monkeypatch):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.2)
    monkeypatch.setattr(chat, "RENDER_STEPS", 10**9)
    with pytest.raises(RuntimeFailure, match="takes more than 0.2 s"):
        rendered(folder, BOMBS["nested loops"][0])


@pytest.mark.parametrize("template, want", [
    ("{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% endfor %}"
     "{% if add_generation_prompt %}<|assistant|>{% endif %}", "<|user|>hello<|assistant|>"),
    ("{{ messages|tojson }}", '[{"role": "user", "content": "hello"}]'),
    ("{{ range(3)|list }}{{ range(5)|length }}{% for i in range(2) %}{{ loop.index }}{% endfor %}", "[0, 1, 2]512"),
    ("{{ messages[0]['content'].replace('l', 'L') }}{{ ', '.join(['a', 'b']) }}", "heLLoa, b"),
    ("{{ '{}-{}'.format(1, 2) }}{{ '%s|%d' % ('a', 3) }}{{ '%05d'|format(3) }}{{ 'ab' * 3 }}", "1-2a|300003ababab"),
    ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "1"),
])
def test_ordinary_templates_render_as_before(folder, template, want):
    assert rendered(folder, template) == want


def test_a_long_prompt_may_render_long(folder):
    prompt = "word " * 300_000  # 1.5 million characters: twice it is allowed on top of the bound
    assert rendered(folder, "{{ messages[0]['content'] }}{{ messages[0]['content'] }}", prompt) == prompt * 2


# --- through the command line ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nested loops", "repeat"])
def test_attn_generate_chat_with_a_bomb_is_exit_1(name, tmp_path, tmp_path_factory):
    needed("tokenizers")
    needed("safetensors")
    from typer.testing import CliRunner

    from _llama_fixtures import build_decoder
    from attncli.cli.main import app

    src = build_decoder("llama", tmp_path_factory.mktemp("llama") / "llama", "float32", None)
    path = tmp_path / "m"
    shutil.copytree(src, path)
    (path / "chat_template.jinja").write_text(BOMBS[name][0])
    result = CliRunner().invoke(app, ["generate", "the cat", "--transformer", str(path), "-n", "2", "--chat",
                                      "--backend", "numpy"])
    err = " ".join(result.stderr.split())
    assert result.exit_code == 1, err
    assert "damaged model" in err and "chat template" in err and "Traceback" not in err


def test_chat_template_reads_special_tokens_saved_as_added_token_objects(tmp_path):
    """tokenizer_config.json may store bos_token as an AddedToken object ({"content": ..., ...}),
    as transformers writes it: the template sees its content."""
    from attncli.hf.text.chat import render

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
                         "{{ eos_token }}",
        "bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True, "__type": "AddedToken"},
        "eos_token": "</s>"}))
    assert render(tmp_path, "m", "hello") == "<s>[user] hello</s>"
