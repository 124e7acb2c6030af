"""Reading a user's text (a file, or stdin for ``-``) with errors a person can act on."""

from __future__ import annotations

import sys
from pathlib import Path

from attncli.errors import BadInput


def read_user_text(path: str | Path, what: str, *, hint: str = "") -> str:
    """The UTF-8 text of ``path`` (stdin when it is ``-``); a BOM is dropped.

    ``what`` names the input in messages ("dictionary file", "--file"); ``hint`` says what a
    valid input looks like. Every failure is a BadInput (exit 2) that names the input.
    """
    hint = f": {hint}" if hint else ""
    if str(path) == "-":
        try:
            return sys.stdin.read().removeprefix("\ufeff")
        except UnicodeDecodeError as exc:
            raise BadInput(f"{what} on stdin is not UTF-8 text (byte {exc.start}){hint}") from None
        except OSError as exc:
            raise BadInput(f"cannot read {what} from stdin: {exc.strerror or exc}") from None
    source = f"{what} {str(path)!r}"
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BadInput(f"{source} does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"{source} is a directory{hint}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{source} is not UTF-8 text (byte {exc.start}){hint}") from None
    except OSError as exc:
        raise BadInput(f"cannot read {source}: {exc.strerror or exc}") from None
