"""``attn stats --out DIR`` named by a symbolic link: followed as an export's file is
(attncli.io.export_target: "a symbolic link: onto the file the link leads to; the link stays a
link"). A link that dangles has its target made as the folder (it said "File exists", exit 1);
a loop of links, or a link into a folder that does not exist, is exit 2 in one line."""

from __future__ import annotations

import os

from _stats_helpers import cli, said, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")


def test_out_through_a_dangling_link_makes_its_target_and_keeps_the_link(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 4)
    link, target = tmp_path / "link", tmp_path / "shards"
    link.symlink_to(target)
    doc = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", link, "--json"])
    assert link.is_symlink() and os.readlink(link) == str(target) and target.is_dir()
    assert [p.name for p in target.iterdir()] == ["shard-000000000000-000000000004.json"]
    assert doc["computed"] == 1
    again = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", link, "--json"])  # a resume, through it
    assert again["computed"] == 0 and again["texts"] == 4


def test_out_that_cannot_be_a_folder_is_exit_2(tiny_gpt2_dir, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 2)
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", a], code=2)
    assert said(r, "loop of symbolic links")
    deep = tmp_path / "deep"
    deep.symlink_to(tmp_path / "missing" / "x")
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", deep], code=2)
    assert said(r, "parent folder does not exist")
    (tmp_path / "file").write_text("x")
    to_file = tmp_path / "to-file"
    to_file.symlink_to(tmp_path / "file")
    r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--out", to_file], code=2)
    assert said(r, "is not a folder") and (tmp_path / "file").read_text() == "x"
