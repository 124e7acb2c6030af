"""A corpus read one text at a time, whatever holds it: memory stays flat however large it is.

    a text file        one text a line (blank lines skipped)
    -                  the same from stdin
    a folder           each *.txt file in it is one text (name order)
    a .jsonl file      one JSON object a line, the text in its ``field`` (also any file given --field)
    a datasets folder  a Hugging Face ``datasets`` dataset written by ``save_to_disk``: ``field`` of
                       each row, of ``split`` for a DatasetDict (the ``datasets`` extra)

Every text is checked (valid Unicode, bounded); a record without the field is BadInput. A corpus
file is streamed a line at a time through fileio's checked open: a regular file only (a FIFO or a
device is refused; stdin, ``-``, is the user's own stream and read as it is).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

from attncli.env import extras
from attncli.errors import BadInput
from attncli.io.fileio import FileProblem, open_regular, read_text
from attncli.io.textio import MAX_INPUT_BYTES, check_text, read_lines, stdin_bytes

DATASET_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def kind_of(source: str, field: Optional[str]) -> str:
    """'stdin', 'lines', 'jsonl', 'folder' or 'dataset' (BadInput for a path that is none)."""
    if source == "-":
        return "jsonl" if field is not None else "stdin"
    path = Path(source)
    if path.is_dir():
        return "dataset" if any((path / m).is_file() for m in DATASET_MARKERS) else "folder"
    if not path.exists():
        raise BadInput(f"the corpus {source!r} does not exist")
    return "jsonl" if field is not None or path.suffix.lower() in JSONL_SUFFIXES else "lines"


def describe(source: str, field: Optional[str]) -> str:
    kind = kind_of(source, field)
    where = "stdin" if source == "-" else repr(source)
    return {"stdin": "lines of stdin", "lines": f"lines of {where}", "jsonl": f"field {field or 'text'!r} of {where}",
            "folder": f".txt files of {where}", "dataset": f"field {field or 'text'!r} of the dataset {where}"}[kind]


def texts(source: str, *, field: Optional[str] = None, split: Optional[str] = None) -> Iterator[str]:
    """Each text of the corpus, in order (see the module docstring)."""
    kind = kind_of(source, field)
    if split is not None and kind != "dataset":
        raise BadInput("--split chooses a split of a saved datasets dataset: the corpus is not one")
    if kind == "folder":
        yield from _folder(Path(source))
    elif kind == "dataset":
        yield from _dataset(Path(source), field or "text", split)
    else:
        what = "stdin" if source == "-" else repr(source)
        if source == "-":
            stream = stdin_bytes("the corpus")
            yield from (_jsonl if kind == "jsonl" else _lines)(stream, what, field or "text")
            return
        try:  # a regular file only (a link is followed to one): a FIFO or a device is refused, never waited on
            stream = open(open_regular(source, follow_symlinks=True), "rb")
        except FileProblem as exc:
            raise BadInput(f"the corpus {what} cannot be read: {exc} (to stream a command's output, "
                           "pipe it in and give - as the corpus)") from None
        with stream:  # read a line at a time, each bounded (read_lines): memory stays flat
            yield from (_jsonl if kind == "jsonl" else _lines)(stream, what, field or "text")


def _lines(stream, what: str, field: str) -> Iterator[str]:
    for _, line in read_lines(stream, f"the corpus {what}"):
        line = line.strip()
        if line:
            yield line


def _jsonl(stream, what: str, field: str) -> Iterator[str]:
    for number, line in read_lines(stream, f"the corpus {what}"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise BadInput(f"line {number} of {what} is not JSON ({str(exc)[:60]}): give one JSON object a line") from None
        if not isinstance(record, dict) or field not in record:
            raise BadInput(f"line {number} of {what} has no field {field!r}: name the text's field with --field")
        value = record[field]
        if not isinstance(value, str):
            raise BadInput(f"line {number} of {what}: the field {field!r} is not a string")
        value = check_text(value, f"line {number} of {what}").strip()
        if value:
            yield value


def _folder(path: Path) -> Iterator[str]:
    names = sorted(p.name for p in path.iterdir() if p.name.endswith(".txt"))
    for name in names:
        try:
            text = read_text(path / name, MAX_INPUT_BYTES).strip()
        except FileProblem as exc:
            raise BadInput(f"the corpus file {str(path / name)!r} cannot be read: {exc}") from None
        if text:
            yield text


def _dataset(path: Path, field: str, split: Optional[str]) -> Iterator[str]:
    try:
        import datasets
    except ImportError:
        raise BadInput(extras.needs("reading a saved datasets dataset", "datasets")) from None
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises its own exception types
        raise BadInput(f"the dataset {str(path)!r} cannot be read: {str(exc)[:200]}") from None
    if isinstance(ds, datasets.DatasetDict):
        names = list(ds)
        chosen = split or ("train" if "train" in ds else names[0] if len(names) == 1 else None)
        if chosen not in ds:
            raise BadInput(f"the dataset {str(path)!r} has the splits {', '.join(names)}: choose one with --split")
        ds = ds[chosen]
    elif split is not None:
        raise BadInput(f"the dataset {str(path)!r} has no splits: drop --split")
    if field not in ds.column_names:
        raise BadInput(f"the dataset {str(path)!r} has no field {field!r} (its fields: "
                       f"{', '.join(ds.column_names)}): name the text's field with --field")
    for number, row in enumerate(ds.select_columns([field])):
        value = row[field]
        if not isinstance(value, str):
            raise BadInput(f"row {number} of the dataset {str(path)!r}: the field {field!r} is not a string")
        value = check_text(value, f"row {number} of the dataset").strip()
        if value:
            yield value
