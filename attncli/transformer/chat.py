"""A prompt wrapped in the model's own chat template (``attn generate --chat``), as transformers'
``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` renders it.

The template is the model directory's ``chat_template.jinja`` (what transformers 5 writes), else
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates: "default").
A template comes from a stranger: it is rendered in jinja2's ImmutableSandboxedEnvironment (no
attribute access to Python internals, no mutation of the arguments, ranges capped), as
transformers renders it. The rendered text already holds the special tokens the template writes
(``{{ bos_token }}``), so it is tokenized without the tokenizer's own (see ``Pretrained.encode``).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from attncli.errors import BadInput, RuntimeFailure

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
LIMIT = 4 * 2**20  # bytes of a template or tokenizer_config.json read at most
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def _read(path: Path) -> str | None:
    from attncli.fileio import FileProblem, read_text

    if not path.exists():
        return None
    try:
        return read_text(path, LIMIT)
    except (FileProblem, UnicodeDecodeError) as exc:
        raise RuntimeFailure(f"cannot read {path}: {exc}") from None


def _config(directory: Path) -> dict[str, Any]:
    text = _read(directory / TOKENIZER_CONFIG)
    try:
        config = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise RuntimeFailure(f"cannot read {directory / TOKENIZER_CONFIG}: {exc}") from None
    return config if isinstance(config, dict) else {}


def template_of(directory: Path) -> str | None:
    """The model's chat template, or None when it has none."""
    text = _read(directory / TEMPLATE_FILE)
    if text is not None:
        return text
    found = _config(directory).get("chat_template")
    if isinstance(found, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    return found if isinstance(found, str) else None


def render(directory: Path, name: str, prompt: str) -> str:
    """``prompt`` as one user message in the model's chat template, ready for the assistant's reply."""
    template = template_of(directory)
    if template is None:
        raise BadInput(f"model '{name}' has no chat template (no {TEMPLATE_FILE}, none in {TOKENIZER_CONFIG}): "
                       "drop --chat")
    try:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise BadInput("--chat renders the model's chat template with jinja2, which is not installed: "
                       "pip install 'attncli[pretrained]'") from None

    def raise_exception(message: str) -> None:
        raise BadInput(f"model '{name}''s chat template refuses the prompt: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, **_: json.dumps(x, indent=indent,
                                                                                       ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    config = _config(directory)
    special = {}
    for key in SPECIAL:
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        special[key] = value if isinstance(value, str) else ""
    try:
        return env.from_string(template).render(messages=[{"role": "user", "content": prompt}],
                                                add_generation_prompt=True, **special)
    except BadInput:
        raise
    except (jinja2.TemplateError, TypeError, ValueError, RecursionError) as exc:
        raise RuntimeFailure(f"model '{name}''s chat template fails: {exc.__class__.__name__}: {exc}") from None
