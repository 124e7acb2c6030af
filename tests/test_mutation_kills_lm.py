"""Tests written for the mutants mutmut found alive in the lm wing (attncli/lm/*.py; docs/mutation-lm.md):
each states a documented behaviour the other tests left open, checked against a reference written
here (a formula, a hand-worked example, or torch). The mutants judged equivalent are listed in
docs/mutation-lm.md, with the reason."""

from __future__ import annotations
