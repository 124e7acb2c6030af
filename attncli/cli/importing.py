"""``attn import``: store a user's pretrained word vectors as a model (a thin layer over
``attncli.vectors.imports``). The summary goes to stdout, the progress bar to stderr."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from attncli.env import paths
from attncli.cli.common import app, emit_json, err_console, escape, out_console
from attncli.cli.options import JsonOpt
from attncli.errors import BadInput
from attncli.vectors import imports, store


@app.command("import")
def import_cmd(
    path: Annotated[str, typer.Argument(help="The vectors file (GloVe .txt, word2vec text or binary, fastText .bin).", show_default=False)],
    *,
    name: Annotated[str, typer.Option("--name", help="Name of the model to store (then --model NAME in every command).", show_default=False)],
    fmt: Annotated[str, typer.Option("--format", help="word2vec (text with a 'COUNT DIM' header, fastText .vec), word2vec-binary, glove (text, no header) or fasttext-bin.", show_default=False)],
    limit: Annotated[Optional[int], typer.Option("--limit", help="Keep only the first N words (the files list the most frequent first).", show_default="all")] = None,
    precision: Annotated[str, typer.Option(help="Stored precision: float32 or float16 (half the disk).")] = "float32",
    json_out: JsonOpt = False,
) -> None:
    """Import pretrained word vectors (GloVe, word2vec, fastText) as an attn model."""
    started = time.perf_counter()
    imports.check_format(fmt)  # every option checked before the file is read
    store.check_new_name(name)
    if precision not in imports.PRECISIONS:
        raise BadInput(f"unknown --precision {precision!r}: choose {' or '.join(imports.PRECISIONS)}")
    if limit is not None and limit < 1:
        raise BadInput(f"--limit must be at least 1, got {limit}")
    imports.sniff(Path(path), fmt)  # a missing file, a pickle or another format: a message before any bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

    err = err_console()
    with Progress(TextColumn("reading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn(),
                  console=err, transient=False) as bar:
        task = bar.add_task("read", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        data = imports.import_file(path, fmt, limit=limit, progress=on_progress)

    replacing = " (replacing the model of that name)" if (paths.models_dir() / name).exists() else ""
    err.print(f"storing {len(data.words):,} words x {data.vectors.shape[1]} dims as model '{escape(name)}'{replacing}", highlight=False)
    meta = imports.store_imported(name, data, fmt=fmt, path=Path(path), precision=precision)
    summary = {
        "model": name,
        "format": fmt,
        "file": Path(path).name,
        "vocab_size": meta["vocab_size"],
        "dim": meta["dim"],
        "subword": meta["subword"],
        "words_in_file": data.words_in_file,
        "precision": precision,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if json_out:
        emit_json(summary)
        return
    sub = meta["subword"]
    extra = (f", fastText n-grams {sub['min_n']}-{sub['max_n']} in {sub['bucket']:,} buckets (unknown words get vectors)"
             if sub else ", no subwords (a word outside the vocabulary has no vector)")
    out_console().print(
        f"Model [bold]{escape(name)}[/]: {meta['vocab_size']:,} words x {meta['dim']} dims{extra}, "
        f"imported from {escape(Path(path).name)} in {summary['seconds']:.1f} s; use it with --model {escape(name)}",
        highlight=False,
    )
