"""SEA-SQL's control flow on a real Spider database, with DummyLM standing in for the model.

Each test scripts the LM's answers in call order and checks which stages ran, how many calls
they cost, and that each prompt holds what the paper puts there (question-retrieved values, the
pre-SQL with its execution result, the error and the reason).
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.sea import SEASQL, BiasEliminator

QUESTION = "How many singers are from France?"
COUNT_ALL = "SELECT count(*) FROM singer"
GOOD = "SELECT count(*) FROM singer WHERE Country = 'France'"
BAD = "SELECT count(*) FROM singer WHERE nation = 'France'"
WORSE = "SELECT count(*) FROM singers WHERE nation = 'France'"
FULL_STAGES = ["values", "generator", "corrector", "corrector"]  # ABE, then DEA


@pytest.fixture()
def db(spider_db) -> Database:
    return spider_db("concert_singer")


def prompts(lm: DummyLM) -> list[str]:
    """The last user message of every call, in order."""
    return [entry["messages"][-1]["content"] for entry in lm.history]


def gen(sql: str) -> dict[str, str]:
    return {"sql": sql}


def review(sql: str) -> dict[str, str]:
    return {"reviewed_sql": sql}


def reason(text: str = "the column is called Country") -> dict[str, str]:
    return {"reason": text}


def fix(sql: str) -> dict[str, str]:
    return {"corrected_sql": sql}


def run(program: SEASQL, answers: list[dict[str, str]], db: Database, **inputs):
    lm = DummyLM(answers)
    with dspy.context(lm=lm):
        pred = program(question=inputs.pop("question", QUESTION), db=db, **inputs)
    return pred, lm


# -- the full system ------------------------------------------------------------------------------


def test_full_runnable_and_approved_costs_two_calls(db: Database) -> None:
    pred, lm = run(SEASQL(), [gen(GOOD), review(GOOD)], db)
    assert pred.sql == GOOD and db.execute(pred.sql).rows == ((4,),)
    assert len(lm.history) == 2
    assert pred.stages == FULL_STAGES
    assert pred.pre_sql == GOOD and pred.eliminated_sql == GOOD and not pred.eliminator_changed
    assert pred.correction_rounds == 0 and len(pred.history) == 1
    generation, elimination = prompts(lm)
    # Semantic-enhanced schema: the value the question names sits next to its column.
    assert "Country ['France']" in generation and QUESTION in generation
    assert "# singer(" in generation and "CREATE TABLE" not in generation
    assert pred.column_values == {"singer.Country": ["France"]}
    # The eliminator sees the pre-SQL and what it returned.
    assert GOOD in elimination and "1 row" in elimination and "4" in elimination
    assert pred.pre_sql_result.startswith("1 row")


def test_eliminator_correction_replaces_a_wrong_pre_sql(db: Database) -> None:
    pred, lm = run(SEASQL(), [gen(COUNT_ALL), review(f"```sql\n{GOOD};\n```")], db)
    assert pred.pre_sql == COUNT_ALL and pred.eliminated_sql == GOOD and pred.eliminator_changed
    assert pred.sql == GOOD and len(lm.history) == 2
    # The count over all singers (6) is what the eliminator had to judge.
    assert COUNT_ALL in prompts(lm)[1] and "6" in prompts(lm)[1]


def test_eliminator_sees_the_error_and_dea_repairs_what_it_left(db: Database) -> None:
    answers = [gen(BAD), review(WORSE), reason(), fix(GOOD)]
    pred, lm = run(SEASQL(), answers, db)
    assert pred.sql == GOOD and pred.adjusted_sql == GOOD
    assert len(lm.history) == 4
    assert pred.correction_rounds == 1
    assert [h["sql"] for h in pred.history] == [WORSE, GOOD]
    generation, elimination, reflection, correction = prompts(lm)
    assert BAD in elimination and "Unknown column" in elimination and "nation" in elimination
    # DEA runs on the eliminated SQL, with the same enhanced schema, and the reason is carried
    # into the correction.
    assert WORSE in reflection and "Country ['France']" in reflection
    assert "the column is called Country" in correction and "Country ['France']" in correction


def test_dea_rounds_are_capped_and_each_costs_two_calls(db: Database) -> None:
    answers = [gen(BAD), review(BAD)] + [reason(), fix(WORSE)] * 2
    pred, lm = run(SEASQL(execution_rounds=2), answers, db)
    assert len(lm.history) == 6
    assert pred.correction_rounds == 2
    assert pred.sql == BAD  # nothing ran: the loop keeps its input
    # Multi-turn: the second correction lists the first failed attempt.
    assert "Earlier attempts" in prompts(lm)[-1]


def test_garbage_from_the_eliminator_keeps_the_pre_sql(db: Database) -> None:
    pred, lm = run(SEASQL(), [gen(GOOD), review("Looks fine to me.")], db)
    assert pred.eliminated_sql == GOOD and pred.sql == GOOD and not pred.eliminator_changed


def test_evidence_reaches_every_call(db: Database) -> None:
    hint = "French means Country = 'France'"
    answers = [gen(BAD), review(BAD), reason(), fix(GOOD)]
    pred, lm = run(SEASQL(), answers, db, evidence=hint)
    assert pred.sql == GOOD
    # ReflectOnError takes no evidence; the other three calls do.
    generation, elimination, _reflection, correction = prompts(lm)
    assert all(hint in p for p in (generation, elimination, correction))


# -- switches and the ablation table -------------------------------------------------------------


def test_without_abe_dea_repairs_the_pre_sql(db: Database) -> None:
    program = SEASQL(bias_elimination=False)
    assert "eliminate" not in dict(program.named_predictors())
    pred, lm = run(program, [gen(BAD), reason(), fix(GOOD)], db)
    assert pred.sql == GOOD and len(lm.history) == 3
    assert pred.stages == ["values", "generator", "corrector"]
    assert pred.eliminated_sql is None and BAD in prompts(lm)[1]


def test_without_dea_a_failing_query_is_returned_as_is(db: Database) -> None:
    program = SEASQL(execution_adjustment=False)
    assert not any(name.startswith("corrector") for name, _ in program.named_predictors())
    pred, lm = run(program, [gen(BAD), review(WORSE)], db)
    assert pred.sql == WORSE and len(lm.history) == 2
    assert pred.stages == ["values", "generator", "corrector"]
    assert pred.adjusted_sql is None and pred.history == []


def test_without_both_only_the_pre_sql_is_written(db: Database) -> None:
    program = SEASQL(**SEASQL.ABLATIONS["no_abe_dea"])
    assert [name for name, _ in program.named_predictors()] == ["generate"]
    pred, lm = run(program, [gen(BAD)], db)
    assert pred.sql == BAD == pred.pre_sql and len(lm.history) == 1
    assert pred.stages == ["values", "generator"]


def test_second_elimination_runs_after_dea(db: Database) -> None:
    answers = [gen(BAD), review(BAD), reason(), fix(COUNT_ALL), review(GOOD)]
    pred, lm = run(SEASQL(second_elimination=True), answers, db)
    assert pred.stages == [*FULL_STAGES, "corrector"]
    assert pred.adjusted_sql == COUNT_ALL and pred.sql == GOOD
    assert len(lm.history) == 5
    assert COUNT_ALL in prompts(lm)[-1] and "6" in prompts(lm)[-1]


@pytest.mark.parametrize(("m", "shown"), [(1, 1), (2, 2), (3, 3)])
def test_values_per_column_limits_the_values_shown(db: Database, m: int, shown: int) -> None:
    question = "Which singers are from France or the Netherlands or the United States?"
    pred, lm = run(SEASQL(**SEASQL.ABLATIONS[f"values_{m}"]), [gen(GOOD)], db, question=question)
    assert len(pred.column_values["singer.Country"]) == shown
    assert all(len(v) <= m for v in pred.column_values.values())
    first = pred.column_values["singer.Country"][0]
    assert f"Country ['{first}'" in prompts(lm)[0]


def test_zero_values_is_the_plain_compact_schema(db: Database) -> None:
    pred, lm = run(SEASQL(**SEASQL.ABLATIONS["values_0"]), [gen(GOOD)], db)
    assert pred.column_values == {} and "[" not in pred.schema
    assert "# singer(Singer_ID, Name, Country, Song_Name" in prompts(lm)[0]


def test_fill_values_shows_format_examples_for_unrelated_columns(db: Database) -> None:
    pred, _ = run(SEASQL(fill_values=True, **SEASQL.ABLATIONS["no_abe_dea"]), [gen(GOOD)], db)
    assert pred.column_values["singer.Country"] == ["France"]  # the related value is still first
    assert len(pred.column_values["stadium.Name"]) == 2  # unrelated to the question, shown anyway


def test_foreign_keys_switch(db: Database) -> None:
    plain, _ = run(SEASQL(**SEASQL.ABLATIONS["no_abe_dea"]), [gen(GOOD)], db)
    assert "REFERENCES" not in plain.schema
    keyed, lm = run(SEASQL(foreign_keys=True, **SEASQL.ABLATIONS["no_abe_dea"]), [gen(GOOD)], db)
    assert "# singer_in_concert(Singer_ID) REFERENCES singer(Singer_ID)" in prompts(lm)[0]


@pytest.mark.parametrize("config", sorted(SEASQL.ABLATIONS))
def test_every_ablation_builds_and_runs_through_the_registry(db: Database, config: str) -> None:
    switches = SEASQL.ABLATIONS[config]
    abe = switches.get("bias_elimination", True)
    dea = switches.get("execution_adjustment", True)
    m = switches.get("values_per_column", 2)
    program = programs.get("sea", **switches)
    assert isinstance(program, SEASQL) and program.switches == SEASQL(**switches).switches
    # A failing pre-SQL: ABE fixes it when on (DEA then has nothing to do), else DEA does.
    answers = (
        [gen(BAD)]
        + ([review(GOOD)] if abe else [])
        + ([reason(), fix(GOOD)] if dea and not abe else [])
    )
    pred, lm = run(program, answers, db)
    assert len(lm.history) == len(answers)
    assert pred.sql == (GOOD if abe or dea else BAD)
    assert pred.stages.count("corrector") == int(abe) + int(dea)
    assert ("['France']" in prompts(lm)[0]) == (m > 0)


def test_ablation_table_mirrors_the_paper() -> None:
    assert {"full", "no_abe", "no_dea", "no_abe_dea"} <= set(SEASQL.ABLATIONS)
    assert {f"values_{m}" for m in range(4)} <= set(SEASQL.ABLATIONS)
    full = SEASQL(**SEASQL.ABLATIONS["full"])
    assert full.values_per_column == 2 and full.bias_elimination and full.execution_adjustment
    for m in range(4):
        cfg = SEASQL.ABLATIONS[f"values_{m}"]
        assert cfg == {
            "values_per_column": m,
            "bias_elimination": False,
            "execution_adjustment": False,
        }


def test_predictors_are_named_after_the_stages() -> None:
    names = [name for name, _ in SEASQL().named_predictors()]
    assert names == ["generate", "eliminate", "corrector.correct", "corrector.reflector"]
    # A compiled program must survive DSPy's deep copies (optimizers work on reset copies).
    assert [n for n, _ in SEASQL().reset_copy().named_predictors()] == names


@pytest.mark.parametrize(
    "switches", [{"values_per_column": -1}, {"top_k": 0}, {"execution_rounds": -1}]
)
def test_bad_switches_are_refused(switches: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        SEASQL(**switches)


def test_compiled_demos_reach_the_generator_prompt(db: Database) -> None:
    program = SEASQL(**SEASQL.ABLATIONS["no_abe_dea"])
    program.generate.demos = [
        dspy.Example(
            dialect="sqlite",
            db_schema="# pets(PetID, weight)",
            question="Heaviest pet?",
            evidence="",
            sql="SELECT PetID FROM pets ORDER BY weight DESC LIMIT 1",
        )
    ]
    _, lm = run(program, [gen(GOOD)], db)
    text = "\n".join(m["content"] for m in lm.history[0]["messages"])
    assert "Heaviest pet?" in text and QUESTION in text


# -- stages: every linker, selector and corrector (issue 14) --------------------------------------

#: A bundled question whose draft the scripted LM breaks, so correction and selection have work.
STAGE_QUESTION = "What is the average, minimum, and maximum age of all singers from France?"
ROLE_CHOICES = [(role, name) for role, names in stages.available().items() for name in names]


@pytest.fixture()
def bundled_db(tmp_path: Path, demo_concert_db: Path) -> Database:
    target = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, target)
    return Database.open(target)


def test_roles_default_to_the_papers_choice() -> None:
    program = SEASQL()
    assert {r: program.switches[r] for r in stages.ROLES} == {
        "linker": "none",
        "selector": "first",
        "corrector": "execution",
    }
    assert program.corrector.reflect and program.corrector.multi_turn
    assert program.corrector.max_rounds == 3
    assert SEASQL(execution_rounds=5, corrector="execution").corrector.max_rounds == 5


@pytest.mark.parametrize(("role", "name"), ROLE_CHOICES, ids=[f"{r}={n}" for r, n in ROLE_CHOICES])
def test_every_stage_of_every_role_runs(bundled_db: Database, role: str, name: str) -> None:
    from record_prompts import ScriptedLM

    program = programs.get("sea", **{role: name})
    assert program.switches[role] == name
    lm = ScriptedLM()
    with dspy.context(lm=lm):
        pred = program(question=STAGE_QUESTION, db=bundled_db)
    assert set(stages.CONTRACT) <= set(pred.keys())
    assert all(isinstance(pred[field], list) for field in stages.CONTRACT[1:])
    assert pred.sql and pred.stages[0] == "values" and lm.calls
    assert {"generator", "corrector"} <= set(pred.stages)
    if role == "linker":
        linking = ["linker"] if name != "none" else []
        assert pred.stages[: 2 + len(linking)] == ["values", *linking, "generator"]
    if role == "selector":
        assert ("selector" in pred.stages) == (name != "first")
        if name != "first":
            assert len(pred.candidates) > 1 and pred.sql in pred.candidates
    if role == "corrector":
        # ABE, then the corrector in DEA's place (none: nothing runs there)
        assert pred.stages.count("corrector") == 1 + (name != "none")
    if (role, name) == ("corrector", "execution"):
        assert pred.history and pred.correction_rounds >= 1


def test_value_linker_prunes_the_enhanced_schema(bundled_db: Database) -> None:
    program = SEASQL(linker="values", **SEASQL.ABLATIONS["no_abe_dea"])
    pred, lm = run(program, [gen(GOOD)], bundled_db)
    assert pred.stages == ["values", "linker", "generator"]
    assert "singer.Country" in pred.linked
    # The pruned schema keeps the linked column with its value and drops unlinked tables.
    assert "Country ['France']" in prompts(lm)[0] and "# stadium(" not in prompts(lm)[0]
    assert "# singer(" in pred.schema and "# stadium(" not in pred.schema


def test_a_stage_instance_is_used_as_given(bundled_db: Database) -> None:
    eliminator = BiasEliminator()
    program = SEASQL(bias_elimination=False, corrector=eliminator)
    assert program.corrector is eliminator and program.switches["corrector"] is None
    pred, lm = run(program, [gen(COUNT_ALL), review(GOOD)], bundled_db)
    assert pred.sql == GOOD and pred.stages == ["values", "generator", "corrector"]
    assert "6" in prompts(lm)[1]  # the reviewer saw the pre-SQL's result


def test_a_deep_copy_runs_with_its_own_stages(bundled_db: Database) -> None:
    program = SEASQL(linker="values", selector="vote")
    twin = copy.deepcopy(program)
    assert twin.switches == program.switches and twin.generate is not program.generate
    pred, _ = run(twin, [gen(GOOD), review(GOOD)], bundled_db)
    assert pred.sql == GOOD


# -- PostgreSQL (optional) -------------------------------------------------------------------------


def test_runs_on_postgres(spider_root: Path) -> None:
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip("SQLWEAVE_PG_URL is not set")
    from sqlweave.transfer import copy_sqlite_to_postgres

    source = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    read_url = copy_sqlite_to_postgres(source, url, schema_name="sea_concert_singer")
    pg_good = "SELECT count(*) FROM singer"
    with Database.open(read_url, name="concert_singer") as pg:
        pred, lm = run(SEASQL(), [gen(BAD), review(pg_good)], pg)
        assert pred.sql == pg_good and pg.execute(pred.sql).rows[0][0] == 6
        assert "Using valid PostgreSQL" in prompts(lm)[0]
        assert "['France']" in prompts(lm)[0]
