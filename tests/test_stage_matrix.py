"""Every program with every registered stage of every role, on 3 bundled questions (issue 14).

Each seed (and ``direct`` and ``weave``) is built with one stage swapped in by registry name, the
way ``get("pet", linker="bidirectional")`` or ``--set linker=bidirectional`` does, and run on three
bundled Spider dev questions against the fixtures' scripted LM (it answers every signature from
the prompt). The checks: the switch is recorded for the artefact, the prediction carries the
output contract with the right types, and LM linkers really link.
"""

from __future__ import annotations

from collections.abc import Iterator

import dspy
import pytest
from record_prompts import ScriptedLM, demo_environment, questions

from sqlweave import programs
from sqlweave.programs import stages

PROGRAMS = ("direct", "weave", "sea", "pet", "mage", "dubo_v1", "dubo_v2", "rsl")
CASES = [
    (program, role, name)
    for program in PROGRAMS
    for role, names in stages.available().items()
    for name in names
]


@pytest.fixture(scope="module", autouse=True)
def _demo_pool() -> Iterator[None]:
    with demo_environment():
        yield


@pytest.mark.parametrize(
    ("program", "role", "name"), CASES, ids=[f"{p}-{r}-{n}" for p, r, n in CASES]
)
def test_every_program_runs_with_every_stage(program: str, role: str, name: str) -> None:
    built = programs.get(program, **{role: name})
    assert built.switches[role] == name  # saved with an artefact, rebuilt on load
    predictions = []
    with dspy.context(lm=ScriptedLM()):
        for ex in questions(3):
            predictions.append(
                built(question=ex.question, db_path=ex.db_path, evidence=ex.get("evidence", ""))
            )
    for pred in predictions:
        assert isinstance(pred.sql, str)
        assert isinstance(pred.stages, list) and all(isinstance(s, str) for s in pred.stages)
        assert pred.stages, "no stage ran"
        assert set(pred.stages) <= set(stages.LABELS), pred.stages  # one vocabulary for all
        assert isinstance(pred.candidates, list) and all(
            isinstance(c, str) for c in pred.candidates
        )
        assert isinstance(pred.linked, list) and all(isinstance(n, str) for n in pred.linked)
        assert isinstance(pred.demos, list) and all(isinstance(d, str) for d in pred.demos)
        assert isinstance(pred.history, list)
    if role == "linker" and name in ("forward", "bidirectional"):
        assert any(pred.linked for pred in predictions), "an LM linker linked nothing"
    if role == "linker" and name == "none" and program not in ("pet", "rsl"):
        assert not any(pred.linked for pred in predictions)


@pytest.mark.parametrize("program", PROGRAMS)
def test_unknown_stage_names_are_refused_by_every_program(program: str) -> None:
    for role in stages.ROLES:
        with pytest.raises(ValueError, match=f"unknown {role}"):
            programs.get(program, **{role: "no_such_stage"})
