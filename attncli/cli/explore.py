"""``attn explore``: the interactive app (a thin layer over ``attncli.explore``).

The options are ``attn matrix``'s, as the starting state. Textual and textual-serve are imported
only here, inside the command, and only when they are installed (the ``explore`` extra).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Optional

import typer

from attncli.env import extras
from attncli.attention.checkpoint_views import check_texts
from attncli.attention.long_view import LongSpec, check_spec
from attncli.attention.model_view import parse_layers
from attncli.cli.common import app
from attncli.cli.matrix import read_sentence
from attncli.cli.options import LONG_OPTIONS, VIEW_OPTIONS, WORD_VECTOR_OPTIONS, declared
from attncli.errors import BadInput
from attncli.explore.serve import DEFAULT_HOST, DEFAULT_PORT, serve as serve_app
from attncli.explore.state import ExploreState
from attncli.hf.formats import source
from attncli.rules.option_conflicts import CONTRIBUTIONS, NEW_SWITCHES, TRANSFORMER_ONLY, VECTOR_SHOWS, validate
from attncli.io.textio import check_length

DEFAULT_SENTENCE = "time flies like an arrow"


def _check_installed(serve: bool) -> None:
    missing = [name for name in ("textual",) + (("textual_serve",) if serve else ())
               if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(extras.needs(f"attn explore ({' and '.join(missing)} not installed)", "explore"))


EXPLORE_HELP = "\n\n".join(" ".join(paragraph.split()) for paragraph in (
    "Explore attention interactively: the matrix of `attn matrix`, with keys for every setting.",
    """Edit the sentence and the context; switch variant, mask, projection, positions and view; move a
    cursor over the cells (the explanation follows); look keys up in a dictionary; export the view
    (SVG, HTML, PNG, JSON) and copy the equivalent `attn matrix` command. Press ? in the app for the keys.""",
    """--transformer: a pretrained model's own attention, as `attn matrix --transformer` shows it; T in the
    app switches to the word-vector matrix of the same sentence, M to the model view (every layer x head,
    --model-view).""",
    """--serve: the same app as a web page (textual-serve), on 127.0.0.1 unless --host says otherwise; only
    the server's own page may drive it (Origin and Host checked), and beyond loopback only with the token
    it prints at start.""",
))


@app.command("explore", help=EXPLORE_HELP)
@declared("sentence", "file", *WORD_VECTOR_OPTIONS, "explain", "model", *VIEW_OPTIONS[:3], *VIEW_OPTIONS[4:], *LONG_OPTIONS,
          "corrupt", "dict_path", "serve", "host", "port")
def explore_cmd(
    sentence: Annotated[Optional[str], typer.Argument(help=f"The starting sentence (default: {DEFAULT_SENTENCE!r}).",
                                                      show_default=False)] = None,
    *,
    file: Annotated[Optional[Path], typer.Option("--file", "-f", help="Read the starting sentence from a file.")] = None,
    explain: Annotated[Optional[tuple[int, int]], typer.Option(help="Start with the cursor on cell (I, J), 0-based.",
                                                               metavar="I J", show_default=False)] = None,
    corrupt: Annotated[Optional[str], typer.Option(help="A corrupted text (as many tokens as the sentence): R draws "
                                                   "attn patch's grid of the two, E attn attribute's.",
                                                   metavar="TEXT", show_default=False)] = None,
    dict_path: Annotated[Optional[str], typer.Option("--dict", help="JSON object of the lookup pane (default: the shipped car.json).",
                                                     show_default=False)] = None,
    serve: Annotated[bool, typer.Option("--serve", help="Serve the app as a web page (textual-serve) instead of running it here.")] = False,
    host: Annotated[Optional[str], typer.Option(help="--serve: the address to listen on (default 127.0.0.1). Anything but "
                                                     "loopback (e.g. 0.0.0.0) makes the app reachable from the network, where "
                                                     "whoever opens it runs it as you (your models, files and exports): the "
                                                     "server then requires a random token, in the URL it prints at start. "
                                                     "Do that only on a network you trust.", show_default=False)] = None,
    port: Annotated[Optional[int], typer.Option(help="--serve: the port to listen on (default 8000).", show_default=False)] = None,
    **options: Any,
) -> None:
    """Explore attention interactively: the matrix of `attn matrix`, with keys for every setting.

    Edit the sentence and the context, switch variant, mask, projection, positions and view, move
    a cursor over the cells (the explanation follows), look keys up in a dictionary, export the
    view (SVG, HTML, PNG, JSON) and copy the equivalent `attn matrix` command. Press ? for the keys.
    """
    o = SimpleNamespace(**options)
    _check_installed(serve)
    if not serve and (host is not None or port is not None):
        raise BadInput(f"--{'host' if host is not None else 'port'} belongs to --serve (the app as a web page): add --serve")
    if "-" in (dict_path, sentence, str(file) if file is not None else None):
        raise BadInput("attn explore reads the keyboard, not stdin: give the sentence as an argument or --file PATH, "
                       "and --dict a file")
    text = DEFAULT_SENTENCE if sentence is None and file is None else read_sentence(sentence, file)
    if not text.strip():
        raise BadInput('the sentence is empty: give a sentence, e.g. attn explore "time flies like an arrow"')
    if corrupt is not None:  # as attn patch and attn attribute refuse it (the table's "causal" rows), at start
        validate(dict(text=text, corrupt=check_length(corrupt, "the corrupted text")), "causal")
    pair_block = o.filter.value if o.filter else None
    checked = dict(pair=o.pair, filter=pair_block, words=o.words, hide_special=o.hide_special, rollout=o.rollout,
                   backend=o.backend.value if o.backend else None, truncate=o.truncate, model_view=o.model_view, layers=o.layers,
                   allow_missing_weights=o.allow_missing_weights, flow=o.flow, layer=o.layer, head=o.head, explain=explain,
                   show=o.show.value, proj=o.proj, rows=o.rows, top_k=o.top_k, pool=o.pool,
                   **{name: options[name] for name in NEW_SWITCHES})
    if o.transformer is None:  # the word-vector matrix's refusals (attncli.rules.option_conflicts)
        given = {name for name in TRANSFORMER_ONLY
                 if checked.get(name) not in (None, False)}
        validate(checked, "vectors", given=given)
    if o.transformer is not None:  # attn matrix --transformer's refusals, before the app starts (exit 2)
        # the extra to install, named before the app starts (auto with a model outside the numpy
        # backend's families finds out it needs transformers when it reads the config, in the app)
        if o.backend is not None and o.backend.value == "torch":
            source.require_transformers()
        else:
            source.require_pretrained()

        check_texts(text, o.pair)
        validate(checked, "explore")
        if o.layers is not None:
            parse_layers(o.layers)  # its form; the range is checked against the model in the app

        check_spec(LongSpec(o.rows, o.top_k, o.pool))  # the values; how they go with the rest: validate above
    elif o.rows is not None:
        raise BadInput("--rows needs --transformer NAME_OR_PATH (a pretrained model)")
    if explain is not None and min(explain) < 0:
        raise BadInput(f"--explain {explain[0]} {explain[1]}: cells are numbered from 0")
    if dict_path is not None and not Path(dict_path).is_file():
        raise BadInput(f"--dict {dict_path!r}: no such file")
    state = ExploreState(
        text=text, context=o.context, variant=o.variant, causal=o.causal, window=o.window, pad_to=o.pad_to,
        positions=o.positions.value, projection=o.proj, d_k=o.d_k, seed=o.seed, heads=o.heads, max_relative=o.max_relative,
        layer=o.layer, head=o.head, model=o.model, show="weights" if o.show.value not in VECTOR_SHOWS else o.show.value,
        norms=o.show.value == "norms", contribution=o.show.value if o.show.value in CONTRIBUTIONS else None, cursor=explain or (0, 0), dict_path=dict_path,
        transformer=o.transformer, pair=o.pair, filter=pair_block, words=o.words,
        hide_special=o.hide_special, rollout=o.rollout, backend=o.backend.value if o.backend else "auto", truncate=o.truncate,
        model_view=o.model_view, layers=o.layers, allow_missing_weights=o.allow_missing_weights, flow=o.flow,
        rows=o.rows, top_k=o.top_k, pool=o.pool, corrupt=corrupt,
        view_options=tuple((name, True) for name in NEW_SWITCHES if options[name]),
    )
    if serve:
        serve_app(state.explore_args(), host=host or DEFAULT_HOST, port=DEFAULT_PORT if port is None else port)
        return
    from attncli.explore.app import run

    raise typer.Exit(run(state))
