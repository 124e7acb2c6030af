"""``attn stats --explore``: the statistics in a Textual app, driven headless by Textual's Pilot:
the cursor moves over heads, n / p change the statistic, the side panel follows the head."""

from __future__ import annotations

import asyncio

from _stats_helpers import cli, write_corpus
from conftest import needed

needed("textual")
needed("tokenizers")
needed("safetensors")


def shown(widget) -> str:
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(widget.content)  # what the widget was given to draw
    return console.file.getvalue()


def test_the_app_follows_the_keys(tiny_gpt2_dir, tmp_path):
    from textual.widgets import Static

    from attncli.explore.stats_app import StatsApp

    doc = cli(["stats", write_corpus(tmp_path / "c.txt", 12), "--transformer", tiny_gpt2_dir, "--json"])
    app = StatsApp(doc)
    seen = {}

    async def main():
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            seen["start"] = (app.names[app.stat], app.cursor, shown(app.query_one("#map", Static)))
            await pilot.press("down", "right", "right", "n", "n")
            await pilot.pause()
            seen["moved"] = (app.names[app.stat], app.cursor, shown(app.query_one("#map", Static)),
                             shown(app.query_one("#head", Static)))
            await pilot.press("p", "up", "up", "left", "left", "left")
            await pilot.pause()
            seen["back"] = (app.names[app.stat], app.cursor)

    asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert seen["start"][:2] == ("sink", (0, 0)) and "sink: mean attention" in seen["start"][2]
    name, cursor, drawn, side = seen["moved"]
    assert (name, cursor) == ("distance", (1, 2)) and "distance:" in drawn
    value = doc["stats"]["previous_token"]["mean"][1][2]
    assert "layer 1 head 2" in side and f"{value:.3f}" in side  # every statistic of the head under the cursor
    first = doc["top"]["sink"][1 * doc["heads"] + 2]["examples"][0]
    assert first["context"] in side and f"{first['score']:.3f}" in side
    assert seen["back"] == ("entropy", (0, 0))  # clamped at the edges


def test_explore_with_json_is_refused(tiny_gpt2_dir, tmp_path):
    r = cli(["stats", write_corpus(tmp_path / "c.txt", 3), "--transformer", tiny_gpt2_dir, "--json", "--explore"], code=2)
    assert "choose one" in " ".join(r.stderr.split())
