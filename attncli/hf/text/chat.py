"""A prompt wrapped in the model's own chat template (``attn generate --chat``), as transformers'
``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` renders it.

The template is the model directory's ``chat_template.jinja`` (what transformers 5 writes), else
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates: "default").
A template comes from a stranger: it is rendered in jinja2's ImmutableSandboxedEnvironment (no
attribute access to Python internals, no mutation of the arguments, ranges capped), as
transformers renders it, and bounded (:class:`_Bounded`): at most RENDER_SECONDS of wall time,
RENDER_STEPS loop steps and calls, and no string or list (made by ``*``, ``+``, a filter, a method,
a namespace) longer than the text it may render, RENDER_CHARS plus twice the prompt's length;
past a bound the model is reported damaged (exit 1). The rendered text already holds the special tokens the template writes
(``{{ bos_token }}``), so it is tokenized without the tokenizer's own (see ``Pretrained.encode``).
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from attncli.env import extras
from attncli.errors import BadInput, RuntimeFailure
from attncli.io.fileio import FileProblem, read_text

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
LIMIT = 4 * 2**20  # bytes of a template or tokenizer_config.json read at most
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")
RENDER_SECONDS = 5.0  # wall time of one render
RENDER_STEPS = 200_000  # loop steps over a range, calls, filters and operators in one render
RENDER_CHARS = 1_000_000  # characters a render may make beyond twice the prompt's


def _read(path: Path) -> str | None:
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
    except ImportError:
        raise BadInput("--chat renders the model's chat template with jinja2, which is not installed: "
                       f"{extras.install_command('pretrained')}") from None

    def raise_exception(message: str) -> None:
        raise BadInput(f"model '{name}''s chat template refuses the prompt: {message}")

    env = _bounded_env(len(prompt))
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, **_: json.dumps(x, indent=indent,
                                                                                       ensure_ascii=ensure_ascii)
    env.bound_filters()
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    config = _config(directory)
    special = {}
    for key in SPECIAL:
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        special[key] = value if isinstance(value, str) else ""
    try:
        return env.render(template, messages=[{"role": "user", "content": prompt}], add_generation_prompt=True,
                          **special)
    except BadInput:
        raise
    except TooMuch as exc:
        raise RuntimeFailure(f"damaged model '{name}': its chat template {exc}") from None
    except MemoryError:
        raise RuntimeFailure(f"damaged model '{name}': its chat template runs out of memory") from None
    except (jinja2.TemplateError, TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise RuntimeFailure(f"model '{name}''s chat template fails: {exc.__class__.__name__}: {exc}") from None


class TooMuch(Exception):
    """A render went past one of its bounds; ``str()`` says which."""


def _bounded_env(prompt_chars: int):
    """A jinja2 sandbox whose renders are bounded in time, steps and size (see the module docstring)."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    limit = RENDER_CHARS + 2 * prompt_chars

    class _Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def __init__(self) -> None:
            super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            self.deadline = math.inf
            self.steps = 0
            self.globals["range"] = self.bounded_range
            self.globals["namespace"] = _namespace_class(self, Namespace)

        def tick(self) -> None:
            self.steps += 1
            if self.steps > RENDER_STEPS:
                raise TooMuch(f"takes more than {RENDER_STEPS:,} steps to render a prompt")
            if time.monotonic() > self.deadline:
                raise TooMuch(f"takes more than {RENDER_SECONDS:g} s to render a prompt")

        def fits(self, value):
            if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > limit:
                raise TooMuch(f"makes a value of {len(value):,} items, more than the {limit:,} a prompt's render may")
            return value

        def small(self, args) -> None:
            """Arguments that cannot make a value past the bound: no number above it (a width, a
            count), and no two sequences whose sizes multiply past it (a join's separator times
            its items, a replace's pieces times its matches), checked before the call makes it."""
            sizes = []
            for value in args:
                if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
                    raise TooMuch(f"passes the number {value:.3g} to a function, more than the {limit:,} it may")
                self.fits(value)
                if isinstance(value, (str, bytes, list, tuple, dict, range, _Steps)):
                    sizes.append(len(value))
            sizes.sort()
            if len(sizes) >= 2 and sizes[-1] * sizes[-2] > limit:
                raise TooMuch(f"passes values of {sizes[-1]:,} and {sizes[-2]:,} items to one function, which may "
                              f"make more than the {limit:,} a prompt's render may")

        def string_method(self, own: str, name: str, args: tuple) -> tuple:
            """A join's items taken (at most the bound) so its size is known before it is made; a
            format's widths (``{:>999999999}``) checked."""
            if name == "join" and len(args) == 1 and not isinstance(args[0], (str, list, tuple, dict)):
                items = []
                for item in args[0]:
                    self.tick()
                    items.append(item)
                    if len(items) > limit:
                        raise TooMuch(f"joins more than {limit:,} items")
                return (items,)
            if name in ("format", "format_map"):
                self.no_wide_format(own)
            return args

        def no_wide_format(self, pattern) -> None:
            if isinstance(pattern, str) and re.search(r"\d{7,}", pattern):
                raise TooMuch("formats with a width or precision of a million or more")

        def bounded_range(self, *args):
            return _Steps(range(*args), self.tick)

        def call_binop(self, context, operator, left, right):
            self.tick()
            if operator == "*":
                for seq, times in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * times > limit:
                        raise TooMuch(f"repeats a value to {len(seq) * times:,} items, more than the {limit:,} it may")
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 \
                    and right * math.log2(abs(left)) > 4096:
                raise TooMuch("raises a number to a power of more than 4,096 bits")
            if operator == "%":
                self.no_wide_format(left)
            if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                self.fits(range(len(left) + len(right)))
            return self.fits(super().call_binop(context, operator, left, right))

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
            __self.tick()
            own = getattr(__obj, "__self__", getattr(getattr(__obj, "__wrapped__", None), "__self__", None))
            # (a method's own string: 'sep'.join(...); '{}'.format is the sandbox's wrapper of it)
            if isinstance(own, str):
                args = __self.string_method(own, getattr(__obj, "__name__", ""), args)
            __self.small((own, *args, *kwargs.values()))
            return __self.fits(super().call(__context, __obj, *args, **kwargs))

        def getattr(self, obj, attribute):
            self.tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            self.tick()
            return super().getitem(obj, argument)

        def bound_filters(self) -> None:
            """Every filter (``center``, ``indent``, ``replace``, ``join`` ...) checked like a call."""
            for name, fn in list(self.filters.items()):
                self.filters[name] = self._bounded(fn, name)

        def _bounded(self, fn, name: str):
            @functools.wraps(fn)  # keeps jinja2's pass_context / pass_environment marks
            def bounded(*args, **kwargs):
                self.tick()
                if name == "format":
                    self.no_wide_format(next((a for a in args if isinstance(a, str)), None))
                self.small([a for a in (*args, *kwargs.values()) if not hasattr(a, "environment")])
                return self.fits(fn(*args, **kwargs))

            return bounded

        def render(self, template: str, **values) -> str:
            """The whole text, made piece by piece, each checked against the bounds."""
            self.deadline = time.monotonic() + RENDER_SECONDS
            self.steps = 0
            pieces, size = [], 0
            for piece in self.from_string(template).generate(**values):
                size += len(piece)
                if size > limit:
                    raise TooMuch(f"renders more than {limit:,} characters for a prompt of {prompt_chars:,}")
                self.tick()
                pieces.append(piece)
            return "".join(pieces)

    return _Bounded()


class _Steps:
    """A range that counts each step it takes against a render's bounds."""

    def __init__(self, numbers: range, tick) -> None:
        self.numbers, self.tick = numbers, tick

    def __iter__(self):
        for n in self.numbers:
            self.tick()
            yield n

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index):
        return self.numbers[index]


def _namespace_class(env, base):
    """jinja2's ``namespace``, each value set in it checked for size (a loop doubling a string)."""

    class BoundedNamespace(base):
        def __setitem__(self, name, value):
            env.tick()
            env.fits(value)
            super().__setitem__(name, value)

    return BoundedNamespace
