"""A command's signature built from a table of declared options, so options several commands share
are written once. A table maps a parameter name to ``(its Annotated type, its default)``: the form
of attncli.cli.options' declarations, which these tables fold into. Typer reads the signature built
here (``__signature__``), so ``--help``, completion and the type checks are the declaration's."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping


def declared(table: Mapping[str, tuple[Any, Any]], *names: str) -> Callable[[Callable], Callable]:
    """``names``: every parameter of the command in ``--help``'s order; a name the function declares
    itself is its own (its arguments and the options only it has), any other is ``table``'s
    (keyword-only) and reaches the function through its ``**options``."""
    def decorate(fn: Callable) -> Callable:
        own = dict(inspect.signature(fn, eval_str=True).parameters)
        if not any(p.kind is p.VAR_KEYWORD for p in own.values()):
            raise TypeError(f"{fn.__name__} takes the declared options through **options")
        params = []
        for name in names:
            if name in own:
                params.append(own.pop(name))
            else:
                annotation, default = table[name]
                params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                                default=default))
        left = [name for name, p in own.items() if p.kind is not p.VAR_KEYWORD]
        if left:
            raise TypeError(f"{fn.__name__}: declared() does not list {', '.join(left)}")
        fn.__signature__ = inspect.Signature(params)
        return fn

    return decorate
