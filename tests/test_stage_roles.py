"""Declared capabilities instead of class checks, and correctors that chain (issue 61).

Programs read what a selector declares (``settles_early``, ``takes_weights``,
``takes_sources``) instead of asking for its class or sniffing its signature; correctors
combine as ``a+b`` chains, and a name registered for a combination (``rules_intersect``) builds
the same chain.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import dspy
import pytest

from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.ensemble import EnsembleSQL
from sqlweave.programs.stages.chain import Chain
from sqlweave.programs.stages.sampling import settle_for
from sqlweave.programs.stages.setops import IntersectCorrector

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    return Database.open(shutil.copy(demo_concert_db, tmp_path / "concert_singer.sqlite"))


# --- capabilities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "settles", "weights", "sources"),
    [
        ("first", False, False, False),
        ("vote", True, True, False),
        ("across", False, True, True),
        ("lm", False, False, False),
        ("runoff", False, True, False),
        ("ranked", False, True, False),
        ("grounded", False, True, False),
    ],
)
def test_each_selector_declares_what_it_reads(name, settles, weights, sources) -> None:
    selector = stages.build("selector", name)
    assert stages.declares(selector, "settles_early") is settles
    assert stages.declares(selector, "takes_weights") is weights
    assert stages.declares(selector, "takes_sources") is sources
    assert bool(settle_for(selector)) is settles
    assert settle_for(selector, needs_all=True) == {}


class MyVote(dspy.Module):
    """A user's selector that declares itself the plain vote: the programs stop early for it."""

    settles_early = True
    timeout_s = 3.0

    def forward(self, candidates: list[str], **_: Any) -> dspy.Prediction:
        return dspy.Prediction(sql=candidates[0], choice=1, lm_called=False)


def test_a_users_selector_is_read_by_what_it_declares() -> None:
    assert settle_for(MyVote()) == {"settle": True, "settle_timeout_s": 3.0}
    assert EnsembleSQL(selector=MyVote(), greedy_weight=1.0)._plain_vote
    assert not EnsembleSQL(selector=MyVote())._plain_vote  # the greedy candidates weigh 2


def test_programs_do_not_ask_a_stage_its_class_or_signature() -> None:
    for path in sorted((REPO / "programs").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "type(self.selector) is" not in text, path.name
        assert "type(selector) is" not in text, path.name
        assert "inspect.signature(type(" not in text, path.name


# --- chains -------------------------------------------------------------------------------------

BOTH_Q = "Which singers are both from France and from the Netherlands?"
LOWER = "SELECT name FROM singer WHERE country IN ('france', 'Netherlands')"


def test_the_registered_combination_is_the_chain(db: Database) -> None:
    alias = stages.build("corrector", "rules_intersect")
    chain = stages.build("corrector", "rules+intersect")
    assert isinstance(alias, IntersectCorrector) and isinstance(chain, Chain)
    for sql in (LOWER, "SELECT count(*) FROM singer", ""):
        a = alias(sql=sql, db=db, question=BOTH_Q)
        b = chain(sql=sql, db=db, question=BOTH_Q)
        assert dict(a.items()) == dict(b.items())
    assert stages.name_of("corrector", alias) == "rules_intersect"
    assert stages.name_of("corrector", chain) == "rules+intersect"
    assert stages.name_of("corrector", "execution+rules") == "execution+rules"


def test_a_chain_merges_its_steps_in_order(db: Database) -> None:
    chain = stages.build("corrector", "rules+joins")
    out = chain(sql="SELECT count(*) FROM singer WHERE country = 'france'", db=db, question="")
    assert "'France'" in out.sql and out.rounds == 1 and out.fired
    assert [h["feedback"].split(":")[0] for h in out.history] == ["rules"]
    assert stages.build("corrector", "none+none").is_noop
    with pytest.raises(ValueError, match="unknown corrector 'rulez'"):
        stages.build("corrector", "rules+rulez")
    with pytest.raises(ValueError, match="corrector chain"):
        stages.build("corrector", "rules+")


def test_a_program_saves_and_rebuilds_a_chain() -> None:
    from sqlweave import programs

    program = programs.get("direct", corrector="rules+intersect")
    assert program.switches["corrector"] == "rules+intersect"
    assert programs.get("direct", **program.switches).corrector.spec == "rules+intersect"
