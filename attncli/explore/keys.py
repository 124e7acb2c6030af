"""Every key of ``attn explore``: one table feeds the app's bindings, its help screen and the docs."""

from __future__ import annotations

from typing import NamedTuple


class Key(NamedTuple):
    key: str  # Textual key name(s), comma-separated
    shown: str  # as the help screen writes it
    action: str  # the app's action
    help: str
    label: str = ""  # the footer's label (empty: not in the footer)


KEYS: tuple[Key, ...] = (
    Key("e", "e", "edit('sentence')", "edit the sentence (Enter applies, Esc returns)", "sentence"),
    Key("k", "k", "edit('context')", "edit the --context sentence: keys and values come from it (empty: self-attention); "
        "with --transformer, the --pair sentence"),
    Key("v", "v / V", "variant(1)", "next / previous attention variant", "variant"),
    Key("V", "", "variant(-1)", "previous attention variant"),
    Key("c", "c", "causal", "causal mask on / off", "causal"),
    Key("w", "w / W", "window(1)", "mask --window N: one more / one fewer key each side (below 1: no window)", "window"),
    Key("W", "", "window(-1)", "window one fewer"),
    Key("a", "a / A", "pad(1)", "--pad-to N: one more / one fewer <pad> key (back to none)"),
    Key("A", "", "pad(-1)", "one <pad> key fewer"),
    Key("p", "p / P", "projection(1)", "next / previous projection: identity, random, trained", "proj"),
    Key("P", "", "projection(-1)", "previous projection"),
    Key("n", "n", "positions", "positions: sinusoidal / none"),
    Key("s", "s / S", "show(1)", "next / previous view: weights, scores (before softmax) or the output vectors; with "
        "--transformer: weights, scores (q.k x scale before the softmax, --show scores), value norms (--show norms), "
        "then the contribution methods, one matrix per layer (--show alti, globenc, value-zeroing)",
        "show"),
    Key("S", "", "show(-1)", "show the previous view"),
    Key("up", "arrows", "move(-1,0)", "move the cursor over the cells (or click a cell): the explanation follows"),
    Key("down", "", "move(1,0)", "cursor down"),
    Key("left", "", "move(0,-1)", "cursor left"),
    Key("right", "", "move(0,1)", "cursor right"),
    Key("T", "T", "transformer", "the pretrained model's attention (--transformer) <-> the word-vector matrix"),
    Key("right_square_bracket", "", "layer(1)", "the next layer"),
    Key("left_square_bracket", "[ / ]", "layer(-1)", "--transformer: the previous / next layer (default: the last)"),
    Key("right_curly_bracket", "", "head(1)", "the next head"),
    Key("left_curly_bracket", "{ / }", "head(-1)", "--transformer: the previous / next head (all heads with their mean, 0, 1, ...)"),
    Key("M", "M", "model_view", "--transformer: the model view (--model-view), every layer x head at a glance with "
        "its class; the arrows, [ / ] and { / } (or a click) move over the heads, Enter or M opens the one under the "
        "cursor in the ordinary view"),
    Key("enter", "", "open_head", "model view: open the head under the cursor"),
    Key("u", "u", "flag('words')", "--transformer: merge word pieces into words (--words)"),
    Key("z", "z", "flag('hide_special')", "--transformer: hide [CLS] / [SEP] / <s> (--hide-special)"),
    Key("f", "f / F", "filter(1)", "--transformer with --pair: the next / previous block, QUERIES-KEYS: all, a-a, a-b, b-a, b-b (--filter)"),
    Key("F", "", "filter(-1)", "the previous block"),
    Key("b", "b", "backend(1)", "--transformer: the forward pass, auto / numpy (attn's own) / torch (transformers) (--backend)"),
    Key("r", "r", "flag('rollout')", "--transformer: attention rollout through the layers up to this one (--rollout)"),
    Key("N", "N", "flag('norms')", "--transformer: value norms ||alpha f(x)|| instead of the weights (--show norms)"),
    Key("o", "o", "flag('flow')", "--transformer: attention flow through layers 0..this one, max-flow from each input "
        "token (--flow; up to 32 tokens)"),
    Key("H", "H", "head_map", "--transformer, decoders: the head map, every layer x head coloured by one role read "
        "from the weights (attn heads --weights --role); s / S: the next / previous role (copying, q_in, k_in, v_in); "
        "H again returns"),
    Key("L", "L", "lens", "--transformer, decoders (GPT-2, Llama family): the logit lens, the top next token after each layer "
        "(attn lens); L again returns"),
    Key("C", "C", "compare", "--transformer: compare with a second text (typed in a box): both matrices at this layer "
        "and head, and B - A (attn compare); [ ] { } u change both; C again returns"),
    Key("Q", "Q", "qk_split", "--transformer, one head: the QK split of the cursor's cell beside its explanation, its "
        "score as query-side x key-side component parts (attn qk; attn's NumPy pass); it follows the cursor; Q again hides it"),
    Key("G", "G", "causal_test('ablate')", "the head-ablation grid of the model's top prediction: each head zeroed, the "
        "change in its log-probability (attn ablate); without --transformer, of attn's built-in LM; G again returns"),
    Key("D", "D", "causal_test('dla')", "decoders: direct logit attribution of the top prediction, each head's and "
        "MLP's part of its logit (attn dla); without --transformer, of attn's built-in LM; D again returns"),
    Key("R", "R", "causal_test('patch')", "with --corrupt TEXT: activation patching of the top prediction, each site "
        "(a layer's residual stream at each position) copied from the sentence's run into the corrupted text's, the "
        "fraction restored (attn patch CLEAN CORRUPT); without --transformer, of attn's built-in LM; R again returns"),
    Key("E", "E", "causal_test('attribute')", "with --corrupt TEXT and --transformer: attribution patching (AtP*) of "
        "the top prediction, every cell of R's grid estimated from one forward and one backward pass (attn "
        "attribute CLEAN CORRUPT); E again returns"),
    Key("l", "l", "pane('lookup')", "lookup pane: type a query, see its weights over the dictionary's keys (--dict)", "lookup"),
    Key("m", "m", "pane('matrix')", "back to the matrix"),
    Key("x", "x", "export", "export the view: .svg, .html, .png or .json (the name's suffix picks), written atomically", "export"),
    Key("y", "y", "copy", "copy the equivalent attn matrix command line (and show it)", "copy cmd"),
    Key("question_mark,f1", "? / F1", "help", "this help", "help"),
    Key("q,ctrl+c", "q / Ctrl-C", "quit", "quit (q: not while typing in a box)", "quit"),
    Key("escape", "Esc", "escape", "leave the box being typed in (the sentence, the lookup query); in the lookup pane, "
        "out of the box: back to the matrix"),
)

# The footer of each mode: the keys that work there (action: label), in this order, the most
# needed first: a narrow terminal's footer (two rows at most, attncli.explore.footer) leaves out
# keys from the end, and help, second after quit, says how many it lists beside them. The other
# keys still answer (with a message saying why they do nothing there); they are only left out of it.
_FIRST = {"quit": "quit", "help": "help"}
_COMMON = {"pane('lookup')": "lookup", "export": "export", "copy": "copy cmd"}
FOOTER: dict[str, dict[str, str]] = {
    "word-vector": {**_FIRST, "edit('sentence')": "sentence", "edit('context')": "context", "variant(1)": "variant",
                    "causal": "causal", "window(1)": "window", "projection(1)": "proj", "show(1)": "show", **_COMMON,
                    "causal_test('ablate')": "ablate", "causal_test('dla')": "dla"},
    "transformer": {**_FIRST, "edit('sentence')": "sentence", "edit('context')": "pair", "layer(1)": "layer",
                    "head(1)": "head", "model_view": "model view", "lens": "lens", "compare": "compare",
                    "qk_split": "qk split", "export": "export", "copy": "copy cmd", "flag('words')": "words",
                    "flag('hide_special')": "specials", "flag('rollout')": "rollout", "flag('flow')": "flow",
                    "filter(1)": "filter", "backend(1)": "backend", "transformer": "vectors",
                    "pane('lookup')": "lookup"},
    "model view": {**_FIRST, "layer(1)": "layer", "head(1)": "head", "model_view": "open head",
                   "export": "export", "copy": "copy cmd"},
    "lookup": {**_FIRST, "escape": "leave box / back", "pane('matrix')": "matrix"},
}


# With --corrupt, R and E come right after quit and help in the word-vector and transformer footers
# (what the app was started for); without it they are left out, and say how to enable them when pressed.
CORRUPT_FOOTER = {"causal_test('patch')": "patch", "causal_test('attribute')": "AtP"}


def help_rows() -> list[tuple[str, str]]:
    """(keys as shown, what they do) for the help screen and docs/explore.md."""
    return [(k.shown, k.help) for k in KEYS if k.shown]
