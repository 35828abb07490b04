"""``sqlweave programs``: each program's paper and what it does, the presets, the stages."""

from __future__ import annotations

from typing import Annotated

import typer

from sqlweave.cli.common import first_line
from sqlweave.cli.root import app

#: Each registered program's paper (or origin) and what it does, for ``sqlweave programs``.
PROGRAM_CARDS: dict[str, tuple[str, str]] = {
    "naive": ("baseline", "the reference prompt: schema + question, one greedy call, no demos"),
    "direct": ("baseline", "full schema + question -> SQL in one call; stages set by switches"),
    "weave": (
        "sqlweave",
        "schema first, masked-question demos, value hints, execution vote, repair on failure",
    ),
    "ensemble": (
        "sqlweave",
        "five papers' generators (greedy + samples each) pooled, then vote / runoff / LM",
    ),
    "dubo": ("Dubo-SQL (v2)", "per-column schema, diverse retrieved demos, JSON answer, fixes"),
    "dubo_v1": ("Dubo-SQL v1", "concise DDL with sample rows -> bare SQL; one retry on error"),
    "dubo_v2": ("Dubo-SQL v2", "per-column schema, diverse retrieved demos, JSON answer, fixes"),
    "mage": (
        "MageSQL",
        "draft -> structure-aware (graph) demos -> few-shot SQL -> rule/guideline correction",
    ),
    "pet": ("PET-SQL", "prompt-enhanced two stages: pre-SQL, linked schema, cross-consistency"),
    "rsl": ("RSL-SQL", "bidirectional linking, augmented regeneration, binary selection, fixes"),
    "sea": ("SEA-SQL", "semantic-enhanced generation, bias elimination, adaptive refinement"),
}


def program_card(name: str) -> str:
    """One line about a program: from :data:`PROGRAM_CARDS`, else its docstring's first line."""
    if name in PROGRAM_CARDS:
        paper, what = PROGRAM_CARDS[name]
        return f"{name:<9} {paper:<14} {what}"
    from sqlweave.programs import program_class

    doc = (program_class(name).__doc__ or "").strip().splitlines()
    return f"{name:<9} {'':<14} {doc[0] if doc else ''}"


@app.command("programs")
def programs_cmd(
    switches: Annotated[
        bool, typer.Option("--switches", help="also list each program's default switches")
    ] = False,
) -> None:
    """One line per program: its paper and what it does; --switches adds each one's default
    switches. Then the stages each role accepts (--set linker=NAME, selector=, corrector=)."""
    from sqlweave.programs import available, get
    from sqlweave.programs.stages import available as stage_names

    for name in available():
        try:
            typer.echo(program_card(name))
        except Exception as err:  # a program that cannot be loaded here says why, the rest list
            typer.echo(f"{name}: cannot be loaded here ({first_line(str(err))})")
            continue
        if switches:
            try:
                shown = " ".join(f"{k}={v}" for k, v in get(name).switches.items())
            except Exception as err:  # a program that cannot be built here says why
                shown = f"cannot be built here ({first_line(str(err))})"
            typer.echo(f"{'':<10}{shown}")
    from sqlweave.programs.presets import DEFAULT_PRESET, PRESETS
    from sqlweave.programs.presets import names as preset_names

    typer.echo("")
    typer.echo("presets (--preset NAME; the default runs when no --program is given):")
    for name in preset_names():
        preset = PRESETS[name]
        mark = " (default)" if name == DEFAULT_PRESET else ""
        typer.echo(f"{name}{mark}: {preset.summary}")
        typer.echo(f"{'':<10}{preset.describe()}; measured: {preset.measured}")
        if preset.space:
            searched = ", ".join(preset.space)
            typer.echo(f"{'':<10}a switch-search compile on your data searches: {searched}")
    typer.echo("")
    typer.echo("stages per role (--set ROLE=NAME):")
    for role, names in stage_names().items():
        typer.echo(f"{role}: {', '.join(names)}")
