"""The project's exceptions. The core raises these; the CLI turns them into a message and an exit code.

``BadInput`` (exit 2) is a user's mistake: a bad option value, an unreadable or malformed file, an
unknown word or model. ``RuntimeFailure`` (exit 1) is something that went wrong while doing valid
work: a missing corpus that could not be downloaded, a disk error, a corrupt stored model.
"""


class AttnError(Exception):
    """Base class of every error attn reports to a user. The message must say what to do."""

    exit_code = 1


class BadInput(AttnError):
    """The user's input or options are wrong (exit code 2)."""

    exit_code = 2


class RuntimeFailure(AttnError):
    """Valid work failed at run time (exit code 1)."""

    exit_code = 1


class TooLong(BadInput):
    """A text longer than the model reads (``n`` tokens, special ones included, for ``limit``). Its
    message names ``--truncate`` (``encode(truncate=True)``), the way out; a command that has no
    --truncate reports :meth:`shorten` instead (attncli.cli.common), naming no option it lacks."""

    def __init__(self, n: int, limit: int, pair: bool):
        self.n, self.limit, self.pair = n, limit, pair
        super().__init__(f"{self.shorten()}, or pass --truncate to cut it to {limit} tokens")

    def shorten(self) -> str:
        what = "the sentence pair" if self.pair else "the text"
        return (f"{what} is {self.n} tokens long (special tokens included), more than the model's limit of "
                f"{self.limit}: shorten it")


class UnknownWord(BadInput):
    """A word has no vector in the model and cannot be built from subwords."""

    def __init__(self, word: str, model: str, has_subwords: bool = False):
        self.word = word
        self.model = model
        if has_subwords:
            hint = (f"it is not in the vocabulary of model '{model}', and too short for the model's character "
                    "n-grams to build a vector from: use a longer word, or a model trained with a smaller --min-n")
        else:
            hint = (
                f"model '{model}' has no subword vectors: use one that has (the built-in default model, "
                "'attn train --algorithm fasttext', or a fastText .bin brought in with 'attn import --format fasttext-bin')"
            )
        shown = f"'{word}'" if len(word) <= 60 else f"'{word[:60]}...' ({len(word):,} characters)"
        super().__init__(f"unknown word {shown}: {hint}")


class Stopped(BaseException):
    """The process was asked to stop by a signal (SIGINT, SIGTERM, SIGHUP): raised from the signal
    handler (``attncli.cli.signals``) so that every ``finally`` and cleanup runs, as for Ctrl-C.

    A BaseException, not an Exception, so nothing that catches errors swallows it, and not a
    KeyboardInterrupt, so Click does not turn it into "Aborted!" (exit 1) during parsing.
    """

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        self.resume: str | None = None  # the --out folder whose finished shards a run started again reuses
        super().__init__(self.name)

    @classmethod
    def of(cls, exc: BaseException) -> "Stopped":
        """``exc`` itself, or a KeyboardInterrupt as the SIGINT it stands for."""
        return exc if isinstance(exc, Stopped) else cls(2)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP

    @property
    def message(self) -> str:
        import signal

        said = "interrupted" if self.signum == signal.SIGINT else f"terminated by {self.name}"
        if self.resume is not None:
            said += f"; the finished shards are kept in {self.resume}: the same command resumes from them"
        return said
