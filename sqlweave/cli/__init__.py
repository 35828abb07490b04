"""The ``sqlweave`` command line: ask, evaluate, compile, synthesize, inspect, report, serve,
programs, models, gnn, demo; one module per command, each parsing its options, calling the
library and printing.

Conventions: ``-h``/``--help`` everywhere, ``--version``; quiet by default (warnings in one line
each, third-party chatter hidden: :mod:`sqlweave.logs`), ``--verbose`` for details, ``--quiet``
for results only; ``--json`` where a script reads the answer; EX printed in percent. Help text
is plain text (no RST markup): typer prints docstrings as written. Shared pieces:
:mod:`~sqlweave.cli.root` (the app), :mod:`~sqlweave.cli.options` (the options several commands
take), :mod:`~sqlweave.cli.common` (errors, logging, the LM), :mod:`~sqlweave.cli.switches`
(``--set``), :mod:`~sqlweave.cli.runs` (an evaluation's identity and summary) and
:mod:`~sqlweave.cli.describe` (what an artefact says). Policy is the library's: a compile is a
:class:`~sqlweave.compile_plan.CompilePlan`, the one ``sqlweave.compile`` runs.
"""

from __future__ import annotations

import sys

# Each command module registers itself on the app; the import order is the order of --help.
# isort: off
from sqlweave.cli import ask, synthesize, evaluate, compile, inspect, gnn, demo  # noqa: F401
from sqlweave.cli import models, report, serve, programs  # noqa: F401

# isort: on
from sqlweave.cli.common import configure_lm as _configure_lm
from sqlweave.cli.compile import DEFAULT_MAX_DEMOS, DEFAULT_N_VAL
from sqlweave.cli.describe import kept_defaults_line as _kept_defaults_line
from sqlweave.cli.describe import switch_changes as _switch_changes
from sqlweave.cli.programs import PROGRAM_CARDS
from sqlweave.cli.root import app
from sqlweave.cli.switches import parse_switches, typed_switches
from sqlweave.switch_types import _scalar_of, switch_types

__all__ = [
    "DEFAULT_MAX_DEMOS",
    "DEFAULT_N_VAL",
    "PROGRAM_CARDS",
    "_configure_lm",
    "_kept_defaults_line",
    "_scalar_of",
    "_switch_changes",
    "app",
    "main",
    "parse_switches",
    "switch_types",
    "typed_switches",
]


def main() -> None:  # pragma: no cover - entry point
    """``python -m sqlweave``: run the app and exit with its status."""
    sys.exit(app())
