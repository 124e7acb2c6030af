"""docs/generate.md's Python example runs as written on the built-in LM: each step printed as it
is drawn, the weights square over the tokens, the --json document of the run."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "generate.md"


def test_the_python_example_runs_as_written(attn_home, capsys):
    block = re.search(r"## Python\n\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block, "docs/generate.md has a ## Python example"
    names: dict = {}
    exec(compile(block.group(1), str(DOC), "exec"), names)  # the page's own code, nothing else
    gen = names["gen"]
    printed = capsys.readouterr().out.splitlines()
    assert 1 <= len(gen.generated) <= 10 and len(printed) == len(gen.steps)
    assert [line.rsplit(" ", 1)[0] for line in printed] == [s.token for s in gen.steps]
    assert gen.weights.shape == (len(gen.tokens), len(gen.tokens))
    assert names["document"](gen)["steps"][0]["token"] == gen.steps[0].token
