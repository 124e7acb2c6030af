"""What attn reads and writes, each through one door (a helper package below every wing).

fileio: the checked read (regular files only, bounded) and the atomic write every file goes through;
textio: a user's text (a file, or stdin for ``-``) and the escape every terminal text goes through
(``visible``, ``token_label``); messages: warnings and notes on stderr from any wing; export_target:
the door every export goes through; faultpoints: named stages a test can pause a writer at.
They import only errors (attncli/errors.py) and each other.
"""
