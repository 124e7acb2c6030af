"""Command ``attn retrieval``: retrieval heads (Wu et al. 2024) on needles in held-out text. It builds
its request (attncli.pipeline.retrieval_compute.RetrievalRequest), hands it to the compute
(attncli.causal.retrieval_heads: the math) and shows the result (views/retrieval_view.py), or its --json."""

from __future__ import annotations

from typing import Any

from attncli.cli.common import app
from attncli.cli.options import declared
from attncli.cli.output import show
from attncli.cli.progress import Progress
from attncli.cli.transformer import load_model
from attncli.pipeline.running import Later
from attncli.pipeline.retrieval_compute import RetrievalRequest, compute, parse_lengths


@app.command("retrieval")
@declared("transformer", "needles", "lengths", "depths", "retrieval_top", "tolerance", "mask", "retrieval_seed",
          "allow_missing_weights", "json_out")
def retrieval_cmd(**options: Any) -> None:
    """Retrieval heads: which heads copy the needle's tokens from a long text into the answer.

    Needles (the secret code of a name is three words) go into held-out Brown text at several
    depths and lengths; the model answers greedily, with a key/value cache that keeps only the
    decoded positions' attention rows. A head copies and pastes a token when its top-1 key is the
    needle's position holding the token the model writes; its retrieval score is the share of the
    needle's tokens it copied, averaged over the samples (Wu et al. 2024). Also the model's recall
    of the needle by length and depth, the number of needles after which the top heads and their
    scores stop changing, and with --mask K the recall with the top K heads masked against K random
    others. JSON keys: model, layers, heads_per_layer, needles, lengths, depths, samples,
    recalled_samples, heads [{layer, head, kv_head, retrieval, retrieval_recalled}], top, recall
    [{length, depth, recall, recalled}], recall_mean, stability {k, tolerance, needles, stable_at,
    curve}, answers, causal {k, seed, recall_clean, top, random}.
    """
    json_out = options["json_out"]
    request = RetrievalRequest(transformer=options["transformer"], needles=options["needles"],
                               lengths=parse_lengths(options["lengths"]), depths=options["depths"], top=options["top"],
                               tolerance=options["tolerance"], mask=options["mask"], seed=options["seed"],
                               allow_missing_weights=options["allow_missing_weights"])
    request.check()  # before any model is read
    show(compute(request, Later(lambda name: load_model(name, "numpy", request.allow_missing_weights,
                                                        json_out=json_out)),
                 progress=Progress(json_out)),
         json_out=json_out)
