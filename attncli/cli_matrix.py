"""Commands of this area (placeholder until implemented)."""

from attncli.cliutil import app  # noqa: F401
