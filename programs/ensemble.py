"""One candidate pool drawn from several papers' generators, then one selection.

Sampling one prompt and voting is where all of our accuracy came from, and its pool limits it:
on unseen databases ``direct``'s eight samples hold about three distinct answers. Candidates from
*different* prompts make different mistakes (CHASE-SQL's three generators, XiYan-SQL's ensemble),
so this program asks each generator of :mod:`sqlweave.programs.stages.generators` for ``samples``
candidates (the first greedy, the rest sampled at ``temperature``, decoded together), pools them
and selects: by the execution vote with a weight per generator, by the LM between the two leading
answers when the vote is close (``runoff``), or by the LM over every answer (``lm``).
Every candidate is returned with its origin and execution class, so a run records what each
generator wrote and whether any was right (oracle EX).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from sqlweave.db import Database
from sqlweave.lm import kept_prompts
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import SQLProgram
from sqlweave.programs.stages import generators as generator_registry
from sqlweave.programs.stages.cascade import greedy_agree
from sqlweave.programs.stages.grounding import ValueLookup
from sqlweave.programs.stages.sampling import Sampler, origin_generator, sampled_origins, settle_for
from sqlweave.programs.stages.voting import Candidates, PoolRepair, VoteTally, group_outcomes

logger = logging.getLogger(__name__)

#: Chosen on spider-train-val (n = 200, every candidate of all five generators on record, replayed
#: over every subset, selector and greedy weight by ``experiments/selection_replay.py``): Dubo v2's,
#: PET's and SEA's prompts, four candidates each, ``across``, greedy weight 2 scored 85.0 against
#: 81.5 for all five with the plain vote, at three generators' cost.
DEFAULT_GENERATORS = "dubo_v2,pet,sea"
#: The sampling temperature of a generator the ``temperature`` switch does not name.
DEFAULT_TEMPERATURE = 0.7
#: Candidates of a generator the ``samples`` switch does not name (and of each, by default).
DEFAULT_SAMPLES = 4


def parse_names(value: str | Sequence[str]) -> tuple[str, ...]:
    """Generator names from ``"a,b"`` or a sequence; each must be registered, none twice."""
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
    names = [n for n in names if n]
    if not names:
        raise ValueError("generators must name at least one generator")
    if len(set(names)) != len(names):
        raise ValueError(f"a generator is named twice in {value!r}")
    for name in names:
        generator_registry.GENERATORS.load(name)  # an unknown name raises, listing the choices
    return tuple(names)


def _per_generator(
    value: str | Mapping[str, float], names: Sequence[str], default: float, what: str
) -> dict[str, float]:
    """``{generator: number}`` from ``"direct=2,sea=0.5"`` (or a mapping); unnamed ones get
    ``default``; a name not among ``names`` is a ValueError."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        pairs = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, sep, number = item.partition("=")
            if not sep:
                raise ValueError(f"a {what} is name=number, got {item!r}")
            pairs.append((name.strip(), number))
    out = dict.fromkeys(names, default)
    for name, number in pairs:
        if name not in out:
            raise ValueError(f"{what} for {name!r}, which is not among the generators {names}")
        out[name] = float(number)
        if out[name] < 0:
            raise ValueError(f"{what}s must be >= 0, got {name}={out[name]}")
    return out


def parse_weights(value: str | Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """Per-generator vote weights from ``"direct=2,sea=0.5"`` (or a dict); unnamed ones weigh 1."""
    return _per_generator(value, names, 1.0, "weight")


def parse_temperatures(
    value: float | str | Mapping[str, float], names: Sequence[str]
) -> dict[str, float]:
    """Per-generator sampling temperatures: one number for all (``0.7``, ``"0.7"``), or
    ``"direct=1.0,dubo_v1=0.7"`` (or a dict), unnamed ones at :data:`DEFAULT_TEMPERATURE`
    (docs/decisions.md, rule 19: one pool at two temperatures)."""
    if isinstance(value, int | float) or (isinstance(value, str) and "=" not in value):
        temperatures = dict.fromkeys(names, float(value))
    else:
        temperatures = _per_generator(value, names, DEFAULT_TEMPERATURE, "temperature")
    for name, t in temperatures.items():
        if not (math.isfinite(t) and t >= 0):  # nan, inf or below 0: no sampling at all
            raise ValueError(f"temperature for {name} must be a finite number >= 0, not {t}")
    return temperatures


def parse_samples(value: int | str | Mapping[str, int], names: Sequence[str]) -> dict[str, int]:
    """Candidates per generator: one number for all (``4``, ``"4"``), or ``"direct=3,sea=2"``
    (or a dict), unnamed ones at :data:`DEFAULT_SAMPLES`; each an integer >= 1
    (docs/decisions.md, rule 21: a third prompt at the same budget draws fewer from each)."""
    if isinstance(value, str) and "=" not in value:
        value = int(value) if value.strip().isdigit() else value
    if not isinstance(value, str | Mapping):
        return dict.fromkeys(names, stage_registry.check_samples(value))
    counts = _per_generator(value, names, DEFAULT_SAMPLES, "samples count")
    out = {}
    for name, count in counts.items():
        if count != int(count):
            raise ValueError(f"samples must be whole numbers, got {name}={count}")
        out[name] = stage_registry.check_samples(int(count))
    return out


class EnsembleSQL(SQLProgram):
    """Candidates from several generators, pooled, then selected.

    Switches:

    * ``generators`` (``"dubo_v2,pet,sea"``, :data:`DEFAULT_GENERATORS`): registered generator
      names (``direct``, ``dubo_v1``, ``dubo_v2``, ``sea``, ``pet``), in the
      order they are asked (ties in the vote go to the earliest candidate);
    * ``samples`` (4) and ``temperature`` (0.7): candidates per generator, the first greedy;
      each is one number or one per generator (``"direct=3,sea=2"``, ``"direct=1.0,dubo_v1=0.7"``);
    * ``weights`` (``""``): per-generator vote weights, ``"direct=2,sea=0.5"`` (others 1);
      ``greedy_weight`` (2.0) multiplies the weight of each generator's greedy candidate;
    * ``selector`` (``across``): ``vote`` (the weighted execution vote), ``runoff`` (the vote, and
      the LM between the two leading answers when the runner-up has ``threshold`` of the
      leader's weight), ``across`` (the answer the most generators hold, the weighted vote
      breaking ties), ``lm`` (the LM among every distinct answer), or any selector stage;
    * ``threshold`` (0.5): the runoff's closeness;
    * ``corrector`` (``rules``): MageSQL's rules on the chosen SQL (no LM call), or any corrector;
    * ``candidate_rules`` (False): MageSQL's rules on *every* candidate as it is drawn, so one that
      fails on a misspelt column or a wrongly cased value joins the selection repaired (the
      early stop still holds: it sees the repaired candidates);
    * ``repair`` (``joins``): a corrector for the candidates that fail to run, applied before the
      selection (``execution``: Dubo-SQL's and SEA-SQL's correction from the error message, one
      round, the error followed by where the schema has the missing name and the keys that
      join it) or ``joins`` (the joins a column of an unjoined table needs, no LM call:
      :mod:`sqlweave.programs.stages.joins`), so a query that only took a column from the wrong
      table joins the vote instead of dropping out; ``repair_scope`` (``fallback``): only when
      no candidate runs, or ``all``: every failing one (``repair_failed`` in
      :mod:`sqlweave.programs.stages.voting` says why the default); ``repair_max`` (None: all): at
      most this many distinct failing queries are repaired per question, those most
      candidates wrote first (bound it for an LM repair). A repaired candidate's origin ends
      in ``:repaired``. On by default: a fallback repair only changes questions where every
      candidate failed, whose answer could not have been right, so it cannot cost a point;
    * ``early_stop`` (True): stop drawing once the plain vote is settled (below). Off, every
      generator is asked whatever the vote says, so a run records each one's candidates (the
      per-generator table); the answer is the same either way;
    * ``sample_rows`` (5): rows per table shown by the generators that show rows (``dubo_v1``;
      passed to those declaring it, :func:`~sqlweave.programs.stages.generators.build_shared`);
    * ``cascade`` (False): ask every generator for its greedy candidate first and stop there
      when they agree (:func:`~sqlweave.programs.stages.cascade.greedy_agree`: all ran, a
      non-empty result, one execution class, every text they compare stored in its column);
      otherwise draw the rest and select over the whole pool, in the same order as without
      it. Rules 27 and 29 of ``docs/decisions.md`` decided it on recorded pools; it replaces
      the early stop below.
    * ``probe`` (False): where the cascade stops, one more candidate, the first generator's
      first sample, joins the pool. It cannot change the answer (the agreeing greedy
      candidates outvote it, and the answer is the first of them); the answer's confidence
      then sees whether a sampled query agrees, which tells apart the answers two agreeing
      greedy queries give (rules 38 and 39 of ``docs/decisions.md``). One sampled call a
      stopped question; the first prompt's state is kept, so only its tokens are decoded.

    **Early stop.** With the plain vote and equal weights the pool stops drawing once the vote is
    settled: before each generator, if the candidates so far decide the vote whatever the
    remaining ones return (:meth:`VoteTally.settled`), the rest are not drawn (exact: the same
    answer class wins). Within a generator's batch nothing stops early, and with weights, a
    runoff or the LM selector every candidate is drawn: a weighted or LM selection needs them.
    With ``repair_scope="all"`` neither: a settled vote counts failed candidates out, and a
    repaired one may join the runner-up.
    """

    name = "ensemble"
    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "generators": (
            "dubo_v2,pet,sea",
            "direct,dubo_v1,dubo_v2,sea,pet",
            "direct,dubo_v1,sea",
            "direct,sea,pet",
            "direct,dubo_v1",
        ),
        "samples": (4, 2, 8),
        "weights": ("", "direct=2", "sea=2", "dubo_v1=2"),
        "greedy_weight": (2.0, 1.0),
        "selector": ("across", "vote", "runoff"),
        "candidate_rules": (False, True),
        "repair": ("joins", "none"),
    }
    #: Configurations whose prompts tests/record_prompts.py records (and the replay checks).
    ABLATIONS = {"full": {}, "runoff": {"selector": "runoff", "weights": "pet=2"}}

    def __init__(
        self,
        generators: str = DEFAULT_GENERATORS,
        samples: int | str = DEFAULT_SAMPLES,
        temperature: float | str = DEFAULT_TEMPERATURE,
        weights: str = "",
        greedy_weight: float = 2.0,
        selector: str | dspy.Module = "across",
        threshold: float = 0.5,
        corrector: str | dspy.Module = "rules",
        early_stop: bool = True,
        candidate_rules: bool = False,
        repair: str | dspy.Module = "joins",
        repair_scope: str = "fallback",
        repair_max: int | None = None,
        sample_rows: int = 5,
        cascade: bool = False,
        probe: bool = False,
    ) -> None:
        names = parse_names(generators)
        counts = parse_samples(samples, names)
        if greedy_weight < 0:
            raise ValueError(f"greedy_weight must be >= 0, got {greedy_weight!r}")
        if sample_rows < 0:
            raise ValueError(f"sample_rows must be >= 0, got {sample_rows!r}")
        super().__init__()
        self.names = names
        self.switches["generators"] = ",".join(names)
        self.weight_of = parse_weights(weights, names)
        temperatures = parse_temperatures(temperature, names)
        self.selector = stage_registry.build(
            "selector", selector, settings={"runoff": {"threshold": float(threshold)}}
        )
        self.corrector = stage_registry.build(
            "corrector",
            corrector,
            settings={"execution": {"max_rounds": 1, "retry_on_empty": True}},
        )
        self.rules = stage_registry.build("corrector", "rules") if candidate_rules else None
        self.repair = PoolRepair(repair, repair_scope, repair_max)
        self.cascade = bool(cascade)
        self.probe = bool(probe)
        for name in names:
            generator = generator_registry.build_shared(name, {"sample_rows": int(sample_rows)})
            setattr(self, f"gen_{name}", generator)
            setattr(
                self,
                f"sample_{name}",
                Sampler(generator.generate, n=counts[name], temperature=temperatures[name]),
            )

    def generator(self, name: str) -> generator_registry.PromptGenerator:
        """The generator stage pooled under ``name``."""
        return getattr(self, f"gen_{name}")

    @property
    def _plain_vote(self) -> bool:
        """Whether the selection is the unweighted vote, which may stop the pool early
        (:func:`~sqlweave.programs.stages.sampling.settle_for`: the selector declares ``settles_early``,
        the weights are equal, and no repair may revive what a settled vote counted out)."""
        uniform = len(set(self.weight_of.values())) == 1 and self.greedy_weight == 1.0
        return bool(settle_for(self.selector, needs_all=not uniform or self.repair.revives))

    def _prompt(self, name: str, ran: stage_registry.Ran, ask: dict[str, Any], db: Database) -> Any:
        """``name``'s prompt for this question, its use recorded."""
        prompt = self.generator(name).prompt(db=db, **ask)
        if prompt.demos:
            ran.record("demos")
        ran.record("generator")
        return prompt

    def _ruled(
        self, sqls: Sequence[str], ran: stage_registry.Ran, question: str, db: Database
    ) -> list[str]:
        """``sqls`` after MageSQL's rules when ``candidate_rules`` is on, else as drawn."""
        if self.rules is None:
            return list(sqls)
        ran.record("corrector", self.rules)
        return [self.rules(sql=c, db=db, question=question).sql for c in sqls]

    def _draw(
        self, ran: stage_registry.Ran, tally: VoteTally, ask: dict[str, Any], db: Database
    ) -> tuple[dict[str, list[str]], str]:
        """Each generator's candidates in turn, until the plain vote is settled (early stop),
        and the first generator's schema text."""
        pools: dict[str, list[str]] = {}
        schema_text = ""
        for position, name in enumerate(self.names):
            sqls = [sql for pool in pools.values() for sql in pool]
            remaining = sum(getattr(self, f"sample_{n}").n for n in self.names[position:])
            if self.early_stop and self._plain_vote and sqls and tally.settled(sqls, remaining):
                logger.debug("ensemble: the vote is settled before %s", name)
                break
            try:
                prompt = self._prompt(name, ran, ask, db)
                drawn = list(getattr(self, f"sample_{name}")(db=db, **prompt.inputs))
            except ContextWindowExceededError as err:
                _too_long(name, err, pools, last=position == len(self.names) - 1)
                continue
            schema_text = schema_text or prompt.schema
            pools[name] = self._ruled(drawn, ran, ask["question"], db)
        return pools, schema_text

    def _draw_cascade(
        self, ran: stage_registry.Ran, tally: VoteTally, ask: dict[str, Any], db: Database
    ) -> tuple[dict[str, list[str]], str]:
        """Every generator's greedy candidate; the rest only when those disagree (``cascade``).

        The rest are drawn last generator first: its prompt is still in the model's KV cache,
        and the others' were kept (:func:`~sqlweave.lm.kept_prompts`), so no prompt is
        evaluated twice. The pools keep the generators' order either way."""
        prompts: dict[str, Any] = {}
        pools: dict[str, list[str]] = {}
        with kept_prompts():
            for position, name in enumerate(self.names):
                try:
                    prompt = self._prompt(name, ran, ask, db)
                    greedy = getattr(self, f"sample_{name}").first(db, **prompt.inputs)
                except ContextWindowExceededError as err:
                    _too_long(name, err, pools, last=position == len(self.names) - 1)
                    continue
                prompts[name] = prompt
                pools[name] = self._ruled(greedy, ran, ask["question"], db)
        schema_text = next(iter(prompts.values())).schema
        firsts = [pool[0] for pool in pools.values()]
        outcomes = [tally.outcome(sql) for sql in firsts]
        if greedy_agree(firsts, outcomes, db.dialect, ValueLookup(db)):
            logger.debug("ensemble: the greedy candidates agree; no samples drawn")
            if self.probe:  # for the confidence alone: it cannot outvote the agreeing pair
                first = next(iter(prompts))
                sampler = getattr(self, f"sample_{first}")
                drawn = sampler.probe(db, **prompts[first].inputs)
                pools[first] += self._ruled(drawn, ran, ask["question"], db)
            return pools, schema_text
        for name in reversed(list(prompts)):
            sampler = getattr(self, f"sample_{name}")
            rest = sampler.rest(db, **prompts[name].inputs)
            pools[name] += self._ruled(rest, ran, ask["question"], db)
        return pools, schema_text

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Besides the output contract (:mod:`sqlweave.programs.stages`): ``candidate_origins``
        (``"<generator>:greedy|sampled"``), ``candidate_groups`` (each candidate's class of
        equivalent results, None when it failed), ``schema`` (the first generator's schema text,
        shown to an LM selector) and ``drawn`` (the generators asked)."""
        ran = stage_registry.Ran()
        ask = {"question": question, "evidence": evidence}
        tally = VoteTally(db)
        draw = self._draw_cascade if self.cascade else self._draw
        pools, schema_text = draw(ran, tally, ask, db)
        sqls: list[str] = []
        origins: list[str] = []
        weights: list[float] = []
        for name, drawn_now in pools.items():
            sqls += drawn_now
            origins += sampled_origins(name, len(drawn_now))
            weights += [
                self.weight_of[name] * (self.greedy_weight if i == 0 else 1.0)
                for i in range(len(drawn_now))
            ]
        drawn = list(pools)
        if len(sqls) > len(drawn):
            ran.record("sampler")
        self.repair(sqls, origins, tally.outcome, {**ask, "db": db, "db_schema": schema_text}, ran)
        outcomes = {sql: tally.outcome(sql) for sql in dict.fromkeys(sqls)}
        pool = Candidates(sqls, outcomes)
        select_ask = {**ask, "db": db, "db_schema": schema_text}
        if len(sqls) > 1:
            options: dict[str, Any] = {}
            if not self._plain_vote and stage_registry.declares(self.selector, "takes_weights"):
                options["weights"] = weights
            if stage_registry.declares(self.selector, "takes_sources"):
                options["sources"] = [origin_generator(origin) for origin in origins]
            sql = ran("selector", self.selector, candidates=pool, **select_ask, **options).sql
        else:
            sql = sqls[0]
        fixed = ran("corrector", self.corrector, sql=sql, **select_ask)
        groups = group_outcomes(sqls, [outcomes[s] for s in sqls], db.dialect)
        group_of: dict[int, int] = {m: g for g, grp in enumerate(groups) for m in grp.members}
        return stage_registry.result(
            fixed.sql,
            stages=ran,
            candidates=sqls,
            origins=origins,
            history=fixed.history,
            candidate_groups=[group_of.get(i) for i in range(len(sqls))],
            schema=schema_text,
            drawn=drawn,
        )


def _too_long(
    name: str, err: ContextWindowExceededError, pools: Mapping[str, Any], *, last: bool
) -> None:
    """A prompt over the model's window (``dubo_v1``'s sample rows are the longest): the other
    generators' candidates still answer; only when none is left is it the question's failure."""
    if last and not pools:
        raise err
    logger.warning(
        "ensemble: %s's prompt is over the model's window; its candidates are left out", name
    )


__all__ = ["DEFAULT_GENERATORS", "EnsembleSQL", "parse_names", "parse_samples", "parse_weights"]
