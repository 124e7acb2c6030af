"""Commands ``train-attention`` (learn W_q, W_k, W_v on Brown with torch) and ``heads`` (what they learned).

Thin layer: the work is in ``tinylm/train.py`` (torch, imported only when training),
``tinylm/model.py`` and ``tinylm/heads.py`` (NumPy only: ``attn heads`` never imports torch).
"""

import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from attncli.cli.common import app, emit_json, err_console, escape, out_console
from attncli.cli.options import EXPORT_OPTIONS, JsonOpt, ModelOpt, declared
from attncli.cli.output import Exports, check_exports, show
from attncli.cli.progress import Progress, Stage
from attncli.cli.transformer import load_model
from attncli.tinylm.train import TrainConfig, train
from attncli.pipeline.heads_compute import HeadsRequest
from attncli.pipeline.heads_compute import compute as compute_heads
from attncli.pipeline.running import Later
from attncli.views.result import Trimmed


@app.command("train-attention")
def train_attention_cmd(
    *,
    model: ModelOpt = None,
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Model to write (a copy of --model's vectors plus the attention). Default: --model itself; required when --model is the built-in one.")] = None,
    epochs: Annotated[int, typer.Option(help="Passes over the training sentences (1-10000).")] = 5,
    layers: Annotated[int, typer.Option(help="Transformer layers (1-64).")] = 2,
    heads: Annotated[int, typer.Option(help="Attention heads per layer; must divide the word-vector dimension (at most 1024).")] = 4,
    max_minutes: Annotated[float, typer.Option(help="Stop training after this many minutes (then evaluate and save); the learning-rate schedule fits itself to it (at most 10080, 7 days).")] = 12.0,
    seed: Annotated[int, typer.Option(help="Seed of the split, the initialisation and the batch order (0 to 2^32-1).")] = 0,
    vocab_size: Annotated[int, typer.Option(help="Output vocabulary: the N most frequent training words, plus <unk> and </s> (2-10000000).")] = 5000,
    max_len: Annotated[int, typer.Option(help="Sentences are cut to this many tokens (2-4096).")] = 80,
    batch_tokens: Annotated[int, typer.Option(help="About this many tokens per batch (16-10000000, and a batch must fit in memory).")] = 2048,
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW, warm-up then cosine decay), in (0, 10].")] = 3e-3,
    dropout: Annotated[float, typer.Option(help="Dropout rate, in [0, 1).")] = 0.0,
    heldout: Annotated[float, typer.Option(help="Fraction of Brown's documents held out for perplexity, in (0, 1).")] = 0.1,
    limit_sentences: Annotated[Optional[int], typer.Option(help="Use only whole documents up to about this many sentences (quick trials; 2-1000000000).")] = None,
    threads: Annotated[Optional[int], typer.Option(help="torch threads (default: the cores not busy with other work, by the load average; 1-1024).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Train a small causal transformer LM on Brown over frozen word vectors; store its attention.

    Held-out perplexity is reported beside a unigram and a Kneser-Ney bigram baseline on the same
    split and vocabulary, and kept in the model's metadata ("attention" in 'attn models --json').
    JSON keys: source, name, path, attention {perplexity, bigram_perplexity, unigram_perplexity, ...}.
    """
    cfg = TrainConfig(layers=layers, heads=heads, epochs=epochs, max_minutes=max_minutes, seed=seed,
                      vocab_size=vocab_size, max_len=max_len, batch_tokens=batch_tokens, lr=lr, dropout=dropout,
                      heldout=heldout, limit_sentences=limit_sentences, threads=threads)
    cfg.check_options()  # every range, before the model is read or torch imported
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("epoch {task.fields[epoch]}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("loss {task.fields[loss]:.3f}"), TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=err_console(), transient=False,
    )
    task = None
    live = err_console().is_terminal
    last_line = time.monotonic()

    preparing = Stage("preparing: reading the model and Brown, splitting, counting the vocabulary and the baselines "
                      "(the bar starts with the first training step)", json_out=json_out)

    def on_progress(*, step, total, epoch, loss, tokens_per_s):
        nonlocal task, last_line
        if task is None:  # the bar starts with the first step: an option refused earlier leaves no blank bar line
            preparing.stop()
            progress.start()
            task = progress.add_task("train", total=total, epoch=epoch, loss=loss, tps=tokens_per_s)
        progress.update(task, completed=step, epoch=epoch, loss=loss, tps=tokens_per_s)
        if not live and time.monotonic() - last_line >= 30:  # a log file gets a line every 30 s
            last_line = time.monotonic()
            err_console().print(f"epoch {epoch} step {step}/{total} loss {loss:.3f} {tokens_per_s:,.0f} tok/s", highlight=False)

    try:
        result = train(model, name, cfg, on_progress=on_progress)
    finally:
        preparing.stop()
        if task is not None:
            progress.stop()
    doc = {"source": result.source, "name": result.name, "path": result.path, "attention": result.attention}
    if json_out:
        emit_json(doc)
        return
    _print_summary(doc)


def _print_summary(doc: dict[str, Any]) -> None:
    from rich.table import Table

    a = doc["attention"]
    table = Table(title=f"trained attention of model '{escape(doc['name'])}' (held-out Brown)")
    table.add_column("model")
    table.add_column("held-out perplexity", justify="right")
    table.add_row(f"transformer ({a['layers']} layers x {a['heads']} heads, d={a['d_model']})", f"{a['perplexity']:.1f}")
    table.add_row("bigram, interpolated Kneser-Ney", f"{a['bigram_perplexity']:.1f}")
    table.add_row("unigram, add-one", f"{a['unigram_perplexity']:.1f}")
    out_console().print(Trimmed(table))  # the centred title without the spaces after it
    note = " (stopped at --max-minutes)" if a["stopped_early"] else ""
    out_console().print(
        f"{a['heldout_targets']:,} held-out targets, output vocabulary {a['output_vocab_size']:,} "
        f"(<unk> rate {a['heldout_unk_rate']:.1%}); {a['epochs_done']} epochs, {a['steps']} steps in "
        f"{a['train_seconds']:.0f} s on {a['threads']} thread{'' if a['threads'] == 1 else 's'}{note}", highlight=False,
    )


@app.command("heads")
@declared("model", "file", "sentences", "window", "json_out", "transformer", "exclude_first", "backend",
          "allow_missing_weights", "stack", "weights", "random", "role", "threshold", *EXPORT_OPTIONS)
def heads_cmd(
    *,
    file: Annotated[Optional[Path], typer.Option("--file", help="Score on these sentences (one per line) instead of the stored held-out ones; with --stack decoder or cross, a line SOURCE<TAB>TARGET gives the decoder its text.")] = None,
    window: Annotated[int, typer.Option(help="'local' = attention within this many tokens back (1-10000).")] = 3,
    exclude_first: Annotated[bool, typer.Option("--exclude-first", help="With --transformer: drop key 0 and renormalise each row first (attention sinks).")] = False,
    weights: Annotated[bool, typer.Option("--weights", help="With --transformer (a decoder): read each head from its weights alone: OV copying score, top OV/QK tokens, Q-/K-/V-composition between heads.")] = False,
    random: Annotated[Optional[int], typer.Option("--random", help="With --transformer (a decoder): score previous-token, duplicate-token and induction heads on N random tokens repeated once (--sentences: how many sequences, default 10).",
                                                  metavar="N", show_default=False)] = None,
    role: Annotated[Optional[str], typer.Option("--role", help="The score the head map of --weights (copying, q_in, k_in, v_in: the strongest composition into a head) or --random (induction, previous_token, duplicate_token) shows.",
                                                metavar="ROLE", show_default=False)] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help="With --weights: list every composition edge above this score (default: the 10 strongest).",
                                                       show_default=False)] = None,
    **options: Any,
) -> None:
    """Score each learned head as previous-token, first-token, self, local or broad (entropy).

    With --transformer, every head of a pretrained model, over 200 held-out Brown sentences (or
    --file), also as next-token, separator, and for decoders duplicate-token and induction
    (docs/transformers.md).

    Scores are mean attention per query on held-out sentences (see 'attncli/tinylm/heads.py' for the
    definitions and the labelling rule). JSON keys: model, layers, heads_per_layer, sentences,
    queries, window, uniform, thresholds, heads [{layer, head, previous_token, first_token, self,
    local, entropy, label}].
    """
    json_out, backend, stack = options["json_out"], options["backend"], options["stack"]
    request = HeadsRequest(model=options["model"], transformer=options["transformer"], file=file,
                           sentences=options["sentences"], window=window, exclude_first=exclude_first,
                           backend=backend.value if backend else "auto",
                           allow_missing_weights=options["allow_missing_weights"], stack=stack.value if stack else None,
                           weights=weights, random=random, role=role, threshold=threshold)
    request.check()  # before any model is read
    exports = Exports.of(options)
    check_exports(exports, json_out)
    show(compute_heads(request, Later(lambda name: load_model(name, request.backend, request.allow_missing_weights,
                                                              json_out=json_out)),
                       progress=Progress(json_out)),
         json_out=json_out, exports=exports)
