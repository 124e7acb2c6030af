"""attn lens, attn compare and attn heads are each a request, a compute and a result: the command
line prints the document the Python API computes from the same request, and the request's
command line, run again, prints it too."""

import json
import shlex

from typer.testing import CliRunner

from attncli.cli.main import app
from attncli.pipeline import CompareRequest, HeadsRequest, LensRequest, compute_compare, compute_heads, compute_lens

SENTENCE = "time flies like an arrow"


def run(args: list[str]) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def same_through_the_command_line(request, result, args: list[str]) -> None:
    doc = json.loads(json.dumps(result.document()))  # tuples as lists, as the JSON has them
    assert run(args) == doc
    assert result.command_line() == request.command_line() == shlex.join(["attn", *args])
    assert run(shlex.split(request.command_line())[1:]) == doc


def test_lens(tiny_gpt2_dir):
    request = LensRequest(SENTENCE, transformer=str(tiny_gpt2_dir), top_k=2)
    result = compute_lens(request)
    assert result.doc["top_k"] == 2 and len(result.doc["lens"][0]) == len(result.doc["tokens"])
    same_through_the_command_line(request, result, ["lens", SENTENCE, "--transformer", str(tiny_gpt2_dir), "--top-k", "2"])


def test_compare(tiny_bert_dir):
    request = CompareRequest(SENTENCE, "fruit flies like a banana", transformer=str(tiny_bert_dir), layer=0, head=1,
                             align="position")
    result = compute_compare(request)
    assert result.comparison.delta.shape == result.comparison.a.shape
    same_through_the_command_line(request, result, ["compare", SENTENCE, "fruit flies like a banana", "--transformer",
                                                    str(tiny_bert_dir), "--layer", "0", "--head", "1", "--align",
                                                    "position"])


def test_heads(tiny_bert_dir, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text(f"{SENTENCE}\nfruit flies like a banana\n", encoding="utf-8")
    request = HeadsRequest(transformer=str(tiny_bert_dir), file=lines, window=2)
    result = compute_heads(request)
    assert result.doc["sentences"] == 2 and len(result.doc["heads"]) == result.doc["layers"] * result.doc["heads_per_layer"]
    same_through_the_command_line(request, result, ["heads", "--transformer", str(tiny_bert_dir), "--file", str(lines),
                                                    "--window", "2"])
