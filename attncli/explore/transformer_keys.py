"""The keys of a pretrained transformer's view in ``attn explore --transformer``: T (its attention
<-> the word-vector matrix), [ ] (layer), { } (head), u z r (--words, --hide-special, --rollout),
f F (--filter), b (--backend), o (--flow), L and C, the logit lens and the comparison with a
second text (attncli.explore.lens_compare), and G, D, R and E, the causal tests (attncli.explore.causal_view;
R and E with --corrupt; without --transformer on attn's built-in LM). Part of the app (ExploreApp derives from it)."""

from __future__ import annotations

from dataclasses import replace

from textual.actions import parse
from textual.app import App
from textual.widgets import Input

from attncli.explore.disabled_keys import key_refusal
from attncli.explore.causal_view import refusal
from attncli.explore.lens_compare import lens_refusal
from attncli.explore.view_keys import WORD_VECTORS, kind_of
from attncli.explore.widgets import CompareScreen


class TransformerKeys(App):
    """The transformer's keys (ExploreApp derives from it)."""

    def _key_refusal(self, action: str, params: tuple) -> str | None:
        """Why this key is disabled now (attncli.rules.option_conflicts), or None."""
        model = getattr(self.result, "model", None) if kind_of(self.result) != WORD_VECTORS else None
        return key_refusal(self.state, action, params, heads=None if model is None else model.heads,
                           layers=None if model is None else model.layers, in_model_view=self._in_model_view())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A key the options table refuses in this state is shown disabled (greyed in the footer)."""
        return None if self._key_refusal(action, parameters) else True

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """A disabled key says why (the table row's message) instead of doing nothing."""
        if isinstance(action, str) and default_namespace in (None, self):
            _, name, params = parse(action)
            reason = self._key_refusal(name, params)
            if reason is not None:
                self._say(reason, error=True)
                return True
        return await super().run_action(action, default_namespace, namespaces)

    def _transformer_only(self, what: str) -> bool:
        if self.state.transformer is not None:
            return True
        self._say(f"{what} needs a pretrained transformer: start with attn explore --transformer NAME_OR_PATH"
                  + (" (or press T)" if self.transformer_name else ""), error=True)
        return False

    def action_transformer(self) -> None:
        """T: the pretrained model's attention <-> the word-vector matrix, same sentence."""
        if self.transformer_name is None:
            self._transformer_only("T")
            return
        on = self.state.transformer is None
        state = replace(self.state, transformer=self.transformer_name if on else None, layer=None, head=None,
                        cursor=(0, 0))
        field = self.query_one("#context", Input)
        field.value = (state.pair if on else state.context) or ""
        field.placeholder = "--pair sentence (one input with the first)" if on else "--context sentence (empty: self-attention)"
        self.recompute(state)

    def action_layer(self, step: int) -> None:
        if self._in_model_view():  # the cursor moves to the previous / next layer of the grid
            self.action_move(step, 0)
        elif self._transformer_only("--layer") and kind_of(self.result) != WORD_VECTORS:
            self.recompute(self.state.step_layer(step, self.result.model.layers))

    def action_head(self, step: int) -> None:
        if self._in_model_view():
            self.action_move(0, step)
        elif self._transformer_only("--head") and kind_of(self.result) != WORD_VECTORS:
            self.recompute(self.state.step_head(step, self.result.model.heads))

    def action_filter(self, step: int) -> None:
        if self._transformer_only("--filter"):
            self.recompute(self.state.next_filter(step))

    def action_backend(self, step: int) -> None:
        if self._transformer_only("--backend"):
            self.recompute(self.state.next_backend(step))

    def action_flag(self, name: str) -> None:
        if self._transformer_only("--" + name.replace("_", "-")):
            self.recompute(self.state.toggle(name))

    def action_lens(self) -> None:
        """L: the logit lens of the sentence (a decoder's; an encoder gets a message), L again: back."""
        if not self._transformer_only("the logit lens (L)"):
            return
        if self.state.lens:
            self.recompute(replace(self.state, lens=False))
            return
        model = getattr(self.result, "model", None)
        if model is not None and not model.is_decoder:  # said at once, the view stays
            self._say(lens_refusal(model), error=True)
            return
        self.recompute(replace(self.state, lens=True, compare_text=None, model_view=False, causal_view=None))

    def action_compare(self) -> None:
        """C: asks for a second text, then draws the sentence's and its matrices and B - A; C again: back."""
        if not self._transformer_only("compare (C)"):
            return
        if self.state.compare_text is not None:
            self.recompute(replace(self.state, compare_text=None))
            return
        self.push_screen(CompareScreen(getattr(self, "_compared", "")), self._compare_with)

    def _compare_with(self, text: str | None) -> None:
        if text is None:
            return
        if not text.strip():
            self._say("the second text is empty: C, then type a sentence to compare with", error=True)
            return
        self._compared = text  # offered again by the next C
        self.recompute(replace(self.state, compare_text=text, lens=False, model_view=False, causal_view=None))

    def action_causal_test(self, kind: str) -> None:
        """G: the head-ablation grid of the sentence's top prediction (attn ablate); D: its direct logit
        attribution (attn dla); with --corrupt, R: attn patch's restored-fraction grid of the two texts,
        E: attn attribute's estimate of it (disabled without --corrupt: attncli.explore.disabled_keys);
        the same key again returns. Without --transformer, on attn's built-in LM (the word-vector
        matrix's sentence, as the commands read it; attn attribute refuses it by name)."""
        if self.state.causal_view == kind:
            self.recompute(replace(self.state, causal_view=None))
            return
        model = getattr(self.result, "model", None) if kind_of(self.result) != WORD_VECTORS else None
        if model is not None:  # said at once, the view stays
            reason = refusal(model, kind, self.state)
            if reason:
                self._say(reason, error=True)
                return
        self.recompute(replace(self.state, causal_view=kind, lens=False, compare_text=None, model_view=False))
