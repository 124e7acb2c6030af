"""Commands for word vectors: ``train``, ``models``, ``eval``, ``similar``.

A thin layer: options are parsed here, the work is done by ``corpus``, ``train``, ``evaluate``,
``store`` and ``vectors``. Results go to stdout, progress and hints to stderr.
"""

import sys
import time
from typing import Annotated, Optional

import typer

from attncli.cli.common import app, emit_json, err_console, escape, out_console, print_error, warn
from attncli.cli.options import JsonOpt, ModelOpt
from attncli.errors import AttnError, BadInput
from attncli.io.textio import clip, read_lines, stdin_bytes
from attncli.vectors import store
from attncli.vectors.corpus import load_corpus
from attncli.vectors.evaluate import evaluate_model
from attncli.vectors.model import load_vectors
from attncli.vectors.tokenize import tokenize
from attncli.vectors.train import TrainParams, train_model  # light: gensim is imported inside train_model only

_D = TrainParams(workers=0)  # the defaults, in one place


@app.command("train")
def train_cmd(
    *,
    algorithm: Annotated[str, typer.Option(help="word2vec or fasttext (fastText has vectors for unseen words).")] = _D.algorithm,
    dim: Annotated[int, typer.Option(help="Vector dimension.")] = _D.dim,
    window: Annotated[int, typer.Option(help="Context window (words on each side).")] = _D.window,
    epochs: Annotated[int, typer.Option(help="Passes over the corpus.")] = _D.epochs,
    min_count: Annotated[int, typer.Option(help="Ignore words rarer than this.")] = _D.min_count,
    sg: Annotated[bool, typer.Option("--sg/--cbow", help="Skip-gram or CBOW.")] = _D.sg,
    negative: Annotated[int, typer.Option(help="Negative samples per positive one.")] = _D.negative,
    sample: Annotated[float, typer.Option(help="Downsampling threshold of frequent words (0: off).")] = _D.sample,
    workers: Annotated[Optional[int], typer.Option(help="Training threads.", show_default="every core")] = None,
    seed: Annotated[int, typer.Option(help="Random seed (runs repeat exactly only with --workers 1).")] = _D.seed,
    name: Annotated[Optional[str], typer.Option(help="Model name.", show_default="brown-ALGORITHM, or FILE-ALGORITHM for --corpus FILE")] = None,
    bucket: Annotated[int, typer.Option(help="fastText: rows of the hashed n-gram table.")] = _D.bucket,
    min_n: Annotated[int, typer.Option(help="fastText: shortest character n-gram.")] = _D.min_n,
    max_n: Annotated[int, typer.Option(help="fastText: longest character n-gram.")] = _D.max_n,
    precision: Annotated[str, typer.Option(help="Stored precision: float16 or float32.")] = _D.precision,
    categories: Annotated[Optional[str], typer.Option(help="Brown categories, comma-separated (e.g. news,fiction).", show_default="all")] = None,
    max_sentences: Annotated[Optional[int], typer.Option(help="Train on the first N sentences only (quick runs).")] = None,
    corpus: Annotated[Optional[str], typer.Option("--corpus", help="Train on this UTF-8 text file (one sentence per line) instead of Brown.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a model that has trained attention (the attention is discarded).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Train word vectors on the Brown corpus (or --corpus FILE) and store them as a model."""
    import os


    started = time.perf_counter()
    params = TrainParams(
        algorithm=algorithm, dim=dim, window=window, epochs=epochs, min_count=min_count, sg=sg,
        negative=negative, sample=sample, workers=workers if workers is not None else (os.cpu_count() or 1),
        seed=seed, bucket=bucket, min_n=min_n, max_n=max_n, precision=precision,
    )
    params.validate()  # before the corpus is read: a bad option fails at once
    if name is not None:  # also before the corpus is read

        store.check_new_name(name)
        store.check_writable(name)  # before the corpus is read and the training starts
        store.check_replace(name, force=force)
    cats = [c for c in categories.split(",")] if categories is not None else None
    if cats is not None and not any(c.strip() for c in cats):
        raise BadInput("--categories is empty: name Brown categories, e.g. --categories news,fiction")
    text = load_corpus(corpus_path=corpus, categories=cats, max_sentences=max_sentences)
    err = err_console()
    err.print(
        f"Training {params.algorithm} ({'skip-gram' if params.sg else 'CBOW'}, {params.dim} dims, "
        f"{params.epochs} epochs, {params.workers} workers) on {escape(text.label())}: "
        f"{len(text.sentences):,} sentences, {text.n_tokens:,} tokens",
        highlight=False,
    )
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("epoch"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(), console=err, transient=False,
    ) as bar:
        task = bar.add_task("train", total=params.epochs, stats="")

        def on_epoch(r) -> None:
            stats = f"{r.words_per_s:,.0f} words/s"
            if r.loss is not None:
                stats += f"  loss {r.loss:,.0f}"
            bar.update(task, advance=1, stats=stats)

        result = train_model(text, params, name=name, progress=on_epoch, started=started, force=force)
    summary = result.summary()
    sims = [n["similarity"] for ns in summary["neighbours"].values() for n in ns]
    if sims and min(sims) > 0.95:
        warn("the probe words' neighbours all have cosines near 1: the vectors have barely moved apart; "
             "train for more --epochs, or on more text")
    if json_out:
        emit_json(summary)
        return
    out = out_console()
    out.print(
        f"Model [bold]{escape(result.name)}[/]: {summary['vocab_size']:,} words x {summary['dim']} dims, "
        f"trained in {summary['train_seconds']:.1f} s ({summary['seconds']:.1f} s in all)",
        highlight=False,
    )
    out.print(_evaluation_table(summary["evaluation"]))
    from rich.table import Table

    table = Table(title="Nearest neighbours of probe words", title_justify="default")
    table.add_column("word")
    table.add_column("neighbours (cosine)")
    for word, ns in summary["neighbours"].items():
        table.add_row(escape(word), escape(", ".join(f"{n['word']} {n['similarity']:.2f}" for n in ns)))
    out.print(table)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _evaluation_table(ev: dict):
    from rich.table import Table

    table = Table(title="Evaluation (oov: share of pairs/questions skipped)", title_justify="default")
    for col in ("benchmark", "spearman", "pearson", "accuracy", "oov"):
        table.add_column(col, justify="left" if col == "benchmark" else "right")
    for key, label in (("wordsim353", "WordSim-353"), ("simlex999", "SimLex-999")):
        r = ev.get(key) or {}
        table.add_row(label, _fmt(r.get("spearman")), _fmt(r.get("pearson")), "", f"{r.get('oov_ratio', 0):.1%}")
    a = ev.get("analogies") or {}
    if a:
        table.add_row("analogies", "", "", _fmt(a.get("accuracy")), f"{a.get('oov_ratio') or 0:.1%}")
    return table


@app.command("models")
def models_cmd(
    *,
    json_out: JsonOpt = False,
) -> None:
    """List the stored models and the built-in default, with their evaluation figures."""
    rows = [_model_row(m) for m in store.list_models()]
    if json_out:
        emit_json(rows)
        return
    if not rows:
        err_console().print("No models yet: train one with 'attn train'.", highlight=False)
        return
    from rich.table import Table

    from rich import box

    default = store.default_model_name()
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True, show_edge=False)
    table.add_column("model", overflow="fold")
    table.add_column("algo", no_wrap=True)
    for col in ("dim", "words"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("corpus", overflow="fold", min_width=8)
    for col in ("WS353", "SimLex", "analogy"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("created", no_wrap=True, min_width=10)
    for r in rows:
        label = r["name"] + ("*" if r["name"] == default else "")
        if r["error"]:
            table.add_row(escape(label), "[red]damaged[/]", "", "", escape(r["error"]), "", "", "", "")
            continue
        ev = r["evaluation"] or {}
        table.add_row(
            escape(label), escape(r["algorithm"] or "?"), str(r["dim"]),
            f"{r['vocab_size']:,}", escape(r["corpus"] or "?"),
            _fmt((ev.get("wordsim353") or {}).get("spearman")), _fmt((ev.get("simlex999") or {}).get("spearman")),
            _fmt((ev.get("analogies") or {}).get("accuracy")), escape((r["created"] or "")[:10]),
        )
    out_console().print(table)
    for r in rows:
        a = r["attention"]
        if a and not r["error"]:
            out_console().print(
                f"{escape(r['name'])}: trained attention ({a['layers']} layers x {a['heads']} heads), held-out "
                f"perplexity {a['perplexity']:.1f} (bigram {a['bigram_perplexity']:.1f}, unigram "
                f"{a['unigram_perplexity']:.1f})", highlight=False,
            )
    err_console().print(
        "default: the built-in model; * used when no --model is given (ATTN_MODEL changes it); "
        "WS353, SimLex: Spearman; analogy: accuracy",
        highlight=False,
    )


def _corpus_label(meta: dict) -> str | None:
    """What a model was trained on, from metadata written by attn train (a dict) or by hand (a string)."""
    corpus = meta.get("corpus")
    return meta.get("corpus_label") or (corpus.get("source") if isinstance(corpus, dict) else corpus)


_ATTENTION_SHOWN = {"layers": int, "heads": int, "perplexity": float, "bigram_perplexity": float, "unigram_perplexity": float}


def _listing_problem(row: dict) -> str | None:
    """What keeps ``attn models`` from showing a row (store.read_meta checked the rest), or None."""
    import json
    import math

    attention = row["attention"]
    if attention:  # shown as "trained attention (L layers x H heads), held-out perplexity ..."
        for key, kind in _ATTENTION_SHOWN.items():
            value = attention.get(key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or (kind is int and (not isinstance(value, int) or value < 1)):
                shown = repr(value) if key in attention else "missing"
                return f"attention.{key} is {shown}, not a {'whole number >= 1' if kind is int else 'number'}"
    if row["corpus"] is not None and not isinstance(row["corpus"], str):
        return f"corpus.source is {row['corpus']!r}, not a string"
    try:
        json.dumps(row, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "a field holds NaN, infinity or something JSON cannot hold"
    return None


def _model_row(m: dict) -> dict:
    """One row of ``attn models``; a model whose metadata cannot be shown is listed as damaged."""
    damaged = "error" in m
    row = {
        "name": m["name"],
        "builtin": m["builtin"],
        "algorithm": m.get("algorithm"),
        "dim": m.get("dim"),
        "vocab_size": m.get("vocab_size"),
        "subwords": bool(m.get("subword")) if not damaged else None,
        "corpus": _corpus_label(m),
        "created": m.get("created"),
        "evaluation": m.get("evaluation") or None,
        "attention": m.get("attention"),  # attn train-attention's summary, or None
        "path": m["path"],
        "error": m.get("error"),
    }
    problem = None if damaged else _listing_problem(row)
    if problem is not None:
        row = dict.fromkeys(row)
        row.update(
            name=m["name"], builtin=m["builtin"], path=m["path"],
            error=f"model '{m['name']}' at {m['path']} is damaged: in its meta.json, {problem}; retrain it",
        )
    return row


@app.command("eval")
def eval_cmd(
    *,
    model: ModelOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Evaluate a model on WordSim-353, SimLex-999 and the analogy questions gensim ships."""
    result = evaluate_model(model)
    if json_out:
        emit_json(result)
        return
    out_console().print(f"Model [bold]{escape(result['model'])}[/]", highlight=False)
    out_console().print(_evaluation_table(result))


def _queries(words: list[str]):
    """The words given, with ``-`` replaced by the lines of stdin (read lazily, one per line;
    each line at most ``textio.MAX_LINE_BYTES``). BadInput if stdin holds no word at all."""
    for w in words:
        if w == "-":
            any_line = False
            for number, line in read_lines(stdin_bytes("words"), "stdin"):
                line = line.strip().removeprefix("\ufeff") if number == 1 else line.strip()
                if line:
                    any_line = True
                    yield line
            if not any_line:
                raise BadInput("no word to look up: stdin ('-') has no non-blank line")
        else:
            yield w


def similar_to(vec, text: str, k: int) -> dict:
    """Neighbours of one query: a word, or several (the mean of their unit vectors)."""
    tokens = tokenize(text)
    if not tokens:
        raise BadInput(f"{clip(text)} has no word in it (letters or digits) to look up")
    query = vec.vector(tokens[0]) if len(tokens) == 1 else vec.phrase_vector(text)
    neighbours = vec.most_similar(query, k=k, exclude=set(tokens))
    return {
        "query": text,
        "tokens": tokens,
        "in_vocabulary": all(t in vec for t in tokens),
        "neighbours": [{"word": w, "similarity": round(s, 4)} for w, s in neighbours],
    }


@app.command("similar")
def similar_cmd(
    words: Annotated[list[str], typer.Argument(help="Words to find neighbours of; '-' reads one per line from stdin.")],
    *,
    k: Annotated[int, typer.Option("-k", "--top", help="How many neighbours.")] = 10,
    model: ModelOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Nearest neighbours by cosine similarity (like word2vec's distance / fastText's nn).

    --json: one JSON object per word (JSON Lines)."""
    if k < 1:
        raise BadInput(f"-k must be at least 1, got {k}")
    vec = load_vectors(model)
    failed: list[AttnError] = []
    out = out_console()
    for text in _queries(words):
        try:
            record = similar_to(vec, text, k)
        except AttnError as exc:  # report it, go on with the other words, exit 2 at the end
            print_error(f"[bold red]error:[/] {escape(str(exc))}")
            failed.append(exc)
            continue
        if json_out:
            emit_json(record, lines=True)
            continue
        note = "" if record["in_vocabulary"] else " [dim](not in the vocabulary: from its character n-grams)[/]"
        out.print(f"[bold]{escape(text)}[/]{note}", highlight=False)
        for n in record["neighbours"]:
            out.print(f"  {n['similarity']:7.4f}  {escape(n['word'])}", highlight=False)
    if failed:
        sys.exit(max(e.exit_code for e in failed))
