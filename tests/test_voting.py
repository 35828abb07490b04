"""Execution-based voting on a real Spider database: classes, weights, the tie rules, fallbacks,
and self-consistency sampling with DummyLM."""

from __future__ import annotations

import dspy
import pytest
from conftest import spy_rollouts
from dspy.utils import DummyLM

from sqlweave.programs.direct import DirectSQL
from sqlweave.programs.stages.sampling import Sampler, SelfConsistency
from sqlweave.programs.stages.voting import VoteTally, equivalent, execution_groups, vote

N_SINGERS = "SELECT count(*) FROM singer"  # 6
N_SINGERS_2 = "SELECT count(singer_id) FROM singer"  # 6, written differently
N_STADIUMS = "SELECT count(*) FROM stadium"  # 9
OLDEST = "SELECT max(age) FROM singer"  # 52
NOBODY = "SELECT name FROM singer WHERE age > 1000"  # empty
NOBODY_2 = "SELECT name FROM singer WHERE age < 0"  # empty
BROKEN = "SELECT nme FROM singer"
BY_AGE = "SELECT name FROM singer ORDER BY age"
BY_AGE_DESC = "SELECT name FROM singer ORDER BY age DESC"
ANY_ORDER = "SELECT name FROM singer"


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def test_groups_execution_equivalent_candidates(db) -> None:
    groups, outcomes = execution_groups([N_SINGERS, BROKEN, N_STADIUMS, N_SINGERS_2], db)
    assert [g.members for g in groups] == [[0, 3], [2]]
    assert [g.weight for g in groups] == [2.0, 1.0]
    assert len(outcomes) == 4 and outcomes[1].kind == "unknown_column"


def test_order_matters_only_when_both_sort(db) -> None:
    groups, _ = execution_groups([BY_AGE, BY_AGE_DESC, ANY_ORDER], db)
    # The two sorted queries differ; the unsorted one matches the first as a multiset.
    assert [g.members for g in groups] == [[0, 2], [1]]


def test_largest_class_wins(db) -> None:
    result = vote([N_STADIUMS, N_SINGERS, BROKEN, N_SINGERS_2], db)
    assert result.sql == N_SINGERS and result.winner_index == 1
    assert result.support == 2.0 and result.total == 4.0 and result.share == 0.5


def test_tie_goes_to_the_earliest_candidate(db) -> None:
    assert vote([OLDEST, N_STADIUMS], db).sql == OLDEST
    assert vote([N_STADIUMS, OLDEST], db).sql == N_STADIUMS
    # A failed first candidate does not count; the earliest that ran wins the tie.
    assert vote([BROKEN, N_STADIUMS, OLDEST], db).winner_index == 1


def test_empty_results_vote_but_lose_ties(db) -> None:
    assert vote([NOBODY, OLDEST], db).sql == OLDEST
    # Empty results agree with each other and can outvote a lone non-empty answer.
    result = vote([OLDEST, NOBODY, NOBODY_2], db)
    assert result.sql == NOBODY and result.support == 2.0


def test_all_fail_returns_the_first(db) -> None:
    result = vote([BROKEN, "SELECT * FROM nowhere", ""], db)
    assert result.sql == BROKEN and result.winner_index == 0
    assert result.groups == [] and result.support == 0.0


def test_weights(db) -> None:
    cands = [N_SINGERS, N_SINGERS_2, N_STADIUMS]
    assert vote(cands, db).sql == N_SINGERS
    heavy = vote(cands, db, weights=[1.0, 1.0, 2.5])
    assert heavy.sql == N_STADIUMS and heavy.support == 2.5
    # Float weights that sum to equal totals tie, and the tie rule applies.
    assert vote([N_SINGERS, N_SINGERS_2, N_STADIUMS], db, weights=[0.1, 0.2, 0.3]).winner_index == 0
    with pytest.raises(ValueError):
        vote(cands, db, weights=[1.0])
    with pytest.raises(ValueError):
        vote([], db)


def test_self_consistency_samples_distinct_rollouts_and_votes(db) -> None:
    lm = DummyLM(
        [
            {"sql": N_STADIUMS},
            {"sql": N_SINGERS},
            {"sql": BROKEN},
            {"sql": f"```sql\n{N_SINGERS_2}\n```"},
        ]
    )
    seen = spy_rollouts(lm)
    with dspy.context(lm=lm):
        # corrector="none": each candidate is the generator's own SQL, unrepaired
        pred = SelfConsistency(DirectSQL(corrector="none"), n=4, temperature=0.8)(
            db=db, question="How many singers are there?"
        )
    assert pred.candidates == [N_STADIUMS, N_SINGERS, BROKEN, N_SINGERS_2]
    assert pred.sql == N_SINGERS and pred.vote.support == 2.0
    # The first (greedy) call used the LM as is; the other three distinct rollouts at T=0.8.
    assert seen == [(1, 0.8), (2, 0.8), (3, 0.8)]


def test_self_consistency_with_a_plain_predictor(db) -> None:
    from sqlweave.signatures import GenerateSQL

    lm = DummyLM([{"sql": OLDEST}, {"sql": N_STADIUMS}, {"sql": N_STADIUMS}])
    with dspy.context(lm=lm):
        pred = SelfConsistency(dspy.Predict(GenerateSQL), n=3)(
            db=db, dialect="sqlite", db_schema="...", question="q", evidence=""
        )
    assert pred.sql == N_STADIUMS


# --------------------------------------------------------------------------- a settled vote


@pytest.mark.parametrize(
    ("candidates", "later", "settled"),
    [
        ([N_SINGERS, N_SINGERS_2, N_SINGERS], 2, True),  # 3 > 0 + 2
        ([N_SINGERS, N_SINGERS_2, N_SINGERS], 3, True),  # a tie at worst (below)
        ([N_SINGERS, N_SINGERS_2, N_SINGERS], 4, False),
        ([N_SINGERS, N_STADIUMS], 1, False),
        # a tie at worst, won by the non-empty class holding the first candidate
        ([N_SINGERS, N_SINGERS_2, N_STADIUMS], 1, True),
        # ... but not by an empty class, nor by one without the first candidate
        ([NOBODY, NOBODY_2, N_STADIUMS], 1, False),
        ([N_STADIUMS, N_SINGERS, N_SINGERS_2], 1, False),
        # unknown candidates (None) count as still to come; failures never vote
        ([N_SINGERS, None, N_SINGERS_2, N_SINGERS], 0, True),
        ([N_SINGERS, None, N_STADIUMS], 0, False),
        ([BROKEN, BROKEN, N_SINGERS], 0, True),
        ([BROKEN, BROKEN], 0, True),  # nothing is left to come
        ([BROKEN, BROKEN], 1, False),
        ([], 1, False),
    ],
)
def test_a_vote_is_settled_when_no_later_candidate_can_change_it(
    db, candidates, later, settled
) -> None:
    assert VoteTally(db).settled(candidates, later) is settled


def test_a_settled_vote_picks_what_the_whole_vote_picks(db) -> None:
    import random

    pool = [N_SINGERS, N_SINGERS_2, N_STADIUMS, OLDEST, NOBODY, NOBODY_2, BROKEN, ANY_ORDER]
    rng = random.Random(0)
    tally = VoteTally(db)
    settled_early = 0
    for _ in range(300):
        full = [rng.choice(pool[: rng.randint(2, len(pool))]) for _ in range(8)]
        whole = vote(full, db)
        for i in range(1, len(full)):
            if tally.settled(full[:i], len(full) - i):
                settled_early += 1
                part = vote(full[:i], db)
                assert whole.groups and part.groups, full
                winner = whole.groups[[g.first for g in whole.groups].index(whole.winner_index)]
                chosen = part.groups[[g.first for g in part.groups].index(part.winner_index)]
                assert equivalent(winner.result, chosen.result), full
                break
    assert settled_early > 50  # the property was put to the test


def test_a_tally_runs_each_distinct_query_once(db, monkeypatch) -> None:
    from sqlweave.programs.stages import voting

    ran: list[str] = []
    real = voting.execute_quietly

    def counted(database, sql, **kwargs):
        ran.append(sql)
        return real(database, sql, **kwargs)

    monkeypatch.setattr(voting, "execute_quietly", counted)
    tally = VoteTally(db)
    tally.settled([N_SINGERS, N_STADIUMS], 3)
    tally.settled([N_SINGERS, N_STADIUMS, N_SINGERS], 2)
    assert ran == [N_SINGERS, N_STADIUMS]


def test_a_settling_sampler_stops_once_the_vote_is_decided(db) -> None:
    answers = [N_SINGERS, N_SINGERS_2, N_SINGERS, N_STADIUMS, OLDEST]
    lm = DummyLM([{"sql": sql} for sql in answers])
    seen = spy_rollouts(lm)
    from sqlweave.signatures import GenerateSQL

    sampler = Sampler(dspy.Predict(GenerateSQL), n=5, temperature=0.8, settle=True)
    inputs = {"dialect": "sqlite", "db_schema": "...", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):
        candidates = sampler(db=db, **inputs)
    # Three agreeing answers of five: the last two cannot outvote them.
    assert candidates == answers[:3] and seen == [(1, 0.8), (2, 0.8)]
    assert vote(candidates, db).sql == vote(answers, db).sql == N_SINGERS
    lm = DummyLM([{"sql": sql} for sql in answers])
    with dspy.context(lm=lm):
        assert Sampler(dspy.Predict(GenerateSQL), n=5, temperature=0.8)(db=db, **inputs) == answers


def test_programs_settle_only_samples_that_go_to_the_plain_vote() -> None:
    from sqlweave.programs.weave import WeaveSQL

    assert DirectSQL(samples=5).sampler.settle
    assert not DirectSQL(samples=5, selector="lm").sampler.settle
    assert WeaveSQL(samples=3).sampler.settle
    # weave's candidate rules mend the candidates before the vote: their raw SQL cannot settle it
    assert not WeaveSQL(samples=3, candidate_rules=True).sampler.settle


def _capture_batch_settle(monkeypatch, answers_at_start):
    """Replace the sampler's batch block: record its ``early_stop`` and what it says, at the
    block's start (no candidate yet), for each list of batch answers in ``answers_at_start``
    (read as candidates by the early stop's reader, then judged)."""
    from contextlib import contextmanager

    from sqlweave.programs.stages import sampling

    seen: dict = {}

    @contextmanager
    def block(k, *, temperature=None, greedy=False, early_stop=None):
        seen["early_stop"] = early_stop
        seen["verdicts"] = [early_stop.settled(a) for a in answers_at_start] if early_stop else []
        yield None

    monkeypatch.setattr(sampling, "batched_samples", block)
    return seen


def test_a_batch_is_judged_on_its_finished_answers_in_the_order_they_will_be_taken(
    db, monkeypatch
) -> None:
    from sqlweave.programs.base import Generator
    from sqlweave.signatures import GenerateSQL

    seen = _capture_batch_settle(
        monkeypatch,
        [
            # finished samples close up behind the first answer: [S, S, S2, ST] and 1 to come
            [N_SINGERS, None, N_SINGERS, N_SINGERS_2, N_STADIUMS],
            # answers past the rollouts left are not candidates: only [S] and 4 to come
            [N_SINGERS, None, None, None, None, N_SINGERS, N_SINGERS],
            # the first answer still decoding: [?, S, S, S, S]
            [None, N_SINGERS, N_SINGERS, N_SINGERS_2, N_SINGERS],
            [None, N_SINGERS, N_STADIUMS, None, None],
        ],
    )
    lm = DummyLM([{"sql": N_SINGERS}] * 5)
    inputs = {"dialect": "sqlite", "db_schema": "...", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):
        Sampler(Generator(GenerateSQL), n=5, temperature=0.8, settle=True)(db=db, **inputs)
    assert seen["verdicts"] == [True, False, True, False]


def test_the_engine_judges_a_batch_only_when_its_texts_are_the_candidates(db, monkeypatch) -> None:
    from sqlweave.signatures import GenerateSQL

    seen = _capture_batch_settle(monkeypatch, [])
    lm = DummyLM([{"sql": N_SINGERS}] * 3)
    inputs = {"dialect": "sqlite", "db_schema": "...", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):  # a plain predictor under DSPy's own adapter: its own parsing
        candidates = Sampler(dspy.Predict(GenerateSQL), n=3, temperature=0.8, settle=True)(
            db=db, **inputs
        )
    assert seen["early_stop"] is None and candidates == [N_SINGERS, N_SINGERS]


def test_the_vote_reuses_the_outcomes_a_settling_sampler_had(db, monkeypatch) -> None:
    from sqlweave.programs.stages import voting
    from sqlweave.programs.stages.voting import Candidates, VoteSelector

    tally = VoteTally(db)
    assert tally.settled([N_SINGERS, N_SINGERS_2, N_STADIUMS], 0)
    ran: list[str] = []
    real = voting.execute_quietly
    monkeypatch.setattr(
        voting, "execute_quietly", lambda d, sql, **kw: ran.append(sql) or real(d, sql, **kw)
    )
    candidates = Candidates([N_SINGERS, N_SINGERS_2, N_STADIUMS], tally.outcomes)
    picked = VoteSelector()(candidates=candidates, db=db)
    assert picked.sql == N_SINGERS and ran == []
    assert VoteSelector()(candidates=list(candidates), db=db).sql == N_SINGERS and len(ran) == 3


def test_candidates_are_a_read_only_sequence_that_carries_the_tally_outcomes(db) -> None:
    from sqlweave.programs.stages.voting import Candidates

    tally = VoteTally(db)
    tally.settled([N_SINGERS, BROKEN], 1)
    candidates = Candidates([N_SINGERS, BROKEN], tally.outcomes)
    assert candidates == [N_SINGERS, BROKEN] and [N_SINGERS, BROKEN] == candidates
    assert candidates != [N_SINGERS] and len(candidates) == 2 and candidates[-1] == BROKEN
    assert set(candidates.outcomes) == {N_SINGERS, BROKEN}
    assert Candidates([N_SINGERS]).outcomes == {}
    with pytest.raises(TypeError):
        hash(candidates)
    # what a plain sampler returns: the same type, with nothing executed
    from sqlweave.signatures import GenerateSQL

    lm = DummyLM([{"sql": N_SINGERS}] * 2)
    inputs = {"dialect": "sqlite", "db_schema": "...", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):
        drawn = Sampler(dspy.Predict(GenerateSQL), n=2, temperature=0.8)(db=db, **inputs)
    assert isinstance(drawn, Candidates) and drawn.outcomes == {}


def test_a_generator_reads_its_candidate_from_an_answer_only_under_a_text_adapter() -> None:
    from sqlweave.programs.base import Generator
    from sqlweave.signatures import GenerateSQL

    read = Generator(GenerateSQL).candidate_reader()
    assert read is not None
    assert read("SELECT count(*) FROM singer;\nThis counts the singers.") == N_SINGERS
    assert read("no query here") == ""
    # DSPy's ChatAdapter parses field markers and may ask again in JSON: the text alone does not
    # say what the call returns, so the generator offers no reader.
    with dspy.context(adapter=dspy.ChatAdapter()):
        assert Generator(GenerateSQL).candidate_reader() is None


def test_the_sampler_hands_the_engine_its_generators_reader(db, monkeypatch) -> None:
    from sqlweave.programs.base import Generator
    from sqlweave.signatures import GenerateSQL

    answers = [
        "SELECT count(*) FROM singer; -- six",
        "SELECT count(*) FROM singer\nThis counts them.",
        f"{N_SINGERS_2};",
    ]
    seen = _capture_batch_settle(monkeypatch, [answers, [answers[0], None, None]])
    lm = DummyLM([{"sql": N_SINGERS}] * 3)
    inputs = {"dialect": "sqlite", "db_schema": "...", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):
        Sampler(Generator(GenerateSQL), n=3, temperature=0.8, settle=True)(db=db, **inputs)
    assert seen["early_stop"].candidate_of(answers[0]) == N_SINGERS
    # the engine's question at the block's start: answers read as candidates, then judged
    assert seen["verdicts"] == [True, False]


def test_pet_draws_its_finsqls_and_samples_through_the_sampler(db, monkeypatch) -> None:
    from contextlib import contextmanager

    from sqlweave.programs.pet import PETSQL
    from sqlweave.programs.stages import sampling

    blocks: list[tuple] = []
    real = sampling.batched_samples

    @contextmanager
    def block(k, *, temperature=None, greedy=False, early_stop=None):
        blocks.append((k, temperature, greedy, early_stop))
        with real(k, temperature=temperature, greedy=greedy, early_stop=early_stop) as batch:
            yield batch

    monkeypatch.setattr(sampling, "batched_samples", block)
    answers = [N_SINGERS, N_STADIUMS, N_SINGERS_2, BROKEN]  # PreSQL, FinSQL, two samples
    lm = DummyLM([{"sql": sql} for sql in answers])
    rollouts = spy_rollouts(lm)
    with dspy.context(lm=lm):
        pred = PETSQL(num_demos=0)(question="How many singers are there?", db=db)
    # one block, opened by the Sampler: FinSQL's greedy call hosting its two samples
    assert blocks == [(2, 0.5, True, None)]
    assert rollouts == [(1, 0.5), (2, 0.5)]
    assert pred.sources == ["finsql[0]", "sample[1]", "sample[2]", "presql"]
    assert pred.candidates == [N_STADIUMS, N_SINGERS_2, BROKEN, N_SINGERS]


def test_the_sampler_tells_its_batch_which_rollout_comes_next(db, monkeypatch) -> None:
    # A batch opened after DSPy's cache answered the first rollouts seeds its samples from
    # the rollout that opens it (the engine reads ``rollout``), so they are fresh draws.
    from sqlweave.lm.batch import current_batch

    seen: list[int] = []

    def rollout(self, lm, database, inputs):  # noqa: ANN001, ANN202 - Sampler._rollout's
        seen.append(current_batch().rollout)
        return N_SINGERS

    monkeypatch.setattr(Sampler, "_rollout", rollout)
    Sampler(dspy.Predict("question -> sql"), n=4, temperature=0.7)(db=db, question="q")
    assert seen == [0, 1, 2, 3]
