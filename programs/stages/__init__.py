"""Stage roles, their implementations by name, and the one output contract of every program.

A sqlweave program is a composition of stages, each a ``dspy.Module`` with one job that can be
used inside any DSPy program. The replaceable roles and their call protocols (keyword arguments;
an implementation accepts and ignores what it does not read):

``linker``
    ``linker(question=, schema=, sql=draft, db_schema=, evidence=, dialect=, db=)`` (RSL-SQL adds
    ``forward_linked=``, a forward link computed earlier) returns
    ``Prediction(linked=LinkedSchema, schema=pruned Schema, ...)`` (a linker with a backward part
    may add ``backward=``, the columns it read in the draft). An empty link means "keep the
    whole schema": a linker that finds nothing must not leave the generator with nothing.
``selector``
    ``selector(candidates=[sql, ...], db=, question=, evidence=, db_schema=)`` returns
    ``Prediction(sql, choice, lm_called, ...)`` (``choice``: 1-based position of ``sql``).
``corrector``
    ``corrector(sql=, db=, question=, evidence=, db_schema=)`` returns
    ``Prediction(sql, rounds, history, ...)`` (``history``: the attempts, as dicts with ``sql``
    and ``feedback``).

The implementations, by registry name (:func:`available`):

============  ===============================================================================
role          names
============  ===============================================================================
linker        ``none``; ``tables`` (PET-SQL: tables a draft reads); ``columns`` (RSL-SQL's
              backward link); ``values`` (columns holding values the question names, plus the
              draft's tables); ``forward`` (RSL-SQL: the LM lists columns); ``bidirectional``
              (RSL-SQL: forward ∪ backward ∪ evidence)
selector      ``first``; ``vote`` (PET-SQL's execution-majority vote); ``lm`` (RSL-SQL's
              selection, the LM chooses between executed candidates); ``runoff`` (the vote,
              and the LM between the two leading answers when it is close); ``across`` (the
              answer the most different generators hold; the vote breaks ties); ``ranked``
              (the vote's classes scored by a linear model fitted on Spider train, no LM call);
              ``grounded`` (the vote among the candidates whose ``= 'text'`` values the
              database stores, no LM call)
corrector     ``none``; ``execution`` (Dubo-SQL / RSL-SQL: fix while the SQL fails or returns
              nothing); ``rules`` (MageSQL's rule-based correction, no LM call); ``mage``
              (MageSQL's rules, then its guideline prompt on predicted-hard cases);
              ``joins`` (the joins a column of an unjoined table needs, no LM call);
              ``intersect`` ("both X and Y" written as an INTERSECT where the answer reads
              it as ``IN (X, Y)``, no LM call); ``rules_intersect`` (``rules+intersect``)
============  ===============================================================================

Correctors chain: ``corrector="rules+intersect"`` runs ``rules``, then ``intersect`` on its
answer (:class:`~sqlweave.programs.stages.chain.Chain`); any registered correctors may be chained this
way, and a name registered for a combination builds the same chain.

Each role's call is a :class:`typing.Protocol` in :mod:`sqlweave.programs.stages.roles`.

The other stages are shared classes rather than roles with alternatives: schema context
(:mod:`sqlweave.caches`, one cache per database), demo source
(:class:`~sqlweave.programs.stages.demos.DemoSource`), generator
(:class:`~sqlweave.programs.base.Generator`) and sampler
(:class:`~sqlweave.programs.stages.sampling.Sampler`).

A seed takes ``linker=``, ``selector=`` and ``corrector=`` constructor arguments: a registry name
(saved with a compiled artefact, and what ``sqlweave ... --set linker=bidirectional`` passes) or
a stage instance (used as given, not saved). Its paper's choice is the default. A program never
asks which class or name a stage has: a stage declares what it does (:data:`CAPABILITIES`:
``is_noop``, ``picks_first``, ``settles_early``, ``takes_weights``, ``takes_sources``, ``takes_db``,
``links_forward``, ``links_backward``) and the program reads that
with :func:`declares`, so a user's stage that declares the same is treated the same. A new
implementation is one class and one :func:`register` call.

**The output contract.** Every program returns, besides its own intermediate fields,
``sql`` (the answer), ``stages`` (the stages that ran, in order, one :data:`LABELS` entry per
role, the same words in every program; recorded by a :class:`Ran` as the stages are called),
``candidates`` (the SQL the selection chose among; ``[sql]`` without one; with
``candidate_origins`` when the program says which generator wrote each), ``linked``
(``table.column`` names kept by linking, ``[]`` without), ``demos`` (questions of the examples
shown) and ``history`` (the correction attempts). LM calls and tokens are never counted by hand: they come from
:func:`sqlweave.lm.track_usage`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import dspy

from sqlweave.programs.stages.chain import SEPARATOR, Chain, chain_names
from sqlweave.programs.stages.roles import CAPABILITIES, declares
from sqlweave.registry import Registry

#: role -> name -> ``module:Class`` (imported on first use, so the registry costs nothing).
STAGES: dict[str, Registry] = {
    "linker": Registry(
        "linker",
        {
            "none": "sqlweave.programs.stages.linking:NoLinker",
            "tables": "sqlweave.programs.stages.linking:DraftTablesLinker",
            "columns": "sqlweave.programs.stages.linking:DraftColumnsLinker",
            "values": "sqlweave.programs.stages.linking:ValueLinker",
            "forward": "sqlweave.programs.stages.linking:ForwardLinker",
            "bidirectional": "sqlweave.programs.stages.linking:BidirectionalLinker",
        },
        base=dspy.Module,
    ),
    "selector": Registry(
        "selector",
        {
            "first": "sqlweave.programs.stages.voting:FirstSelector",
            "vote": "sqlweave.programs.stages.voting:VoteSelector",
            "across": "sqlweave.programs.stages.voting:AcrossSelector",
            "lm": "sqlweave.programs.stages.selection:CandidateSelector",
            "runoff": "sqlweave.programs.stages.selection:RunoffSelector",
            "ranked": "sqlweave.programs.stages.reranker:RankSelector",
            "grounded": "sqlweave.programs.stages.grounding:GroundedSelector",
        },
        base=dspy.Module,
    ),
    "corrector": Registry(
        "corrector",
        {
            "none": "sqlweave.programs.stages.correction:NoCorrector",
            "execution": "sqlweave.programs.stages.correction:CorrectionLoop",
            "rules": "sqlweave.programs.stages.correction:RuleCorrector",
            "mage": "sqlweave.programs.mage:MageCorrector",
            "joins": "sqlweave.programs.stages.joins:JoinCorrector",
            "intersect": "sqlweave.programs.stages.setops:IntersectRewrite",
            # A combination under the name recorded runs and presets use: rules+intersect.
            "rules_intersect": "sqlweave.programs.stages.setops:IntersectCorrector",
        },
        base=dspy.Module,
    ),
}

ROLES = tuple(STAGES)

#: The fields every program's prediction carries.
CONTRACT = ("sql", "stages", "candidates", "linked", "demos", "history")

#: What the ``stages`` field may hold: one label per role, the same in every program, in the
#: order a pipeline usually runs them. A role that runs twice (RSL-SQL's two generations, SEA-SQL's
#: bias elimination then execution adjustment, both correctors) is recorded twice.
LABELS = (
    "demos",  # a demo source retrieved examples for the prompt
    "values",  # stored values the question names were looked up for the prompt
    "linker",  # a linker pruned (or tried to prune) the schema
    "generator",  # an LM call wrote SQL
    "sampler",  # more SQL was sampled beside the generator's, for a selector
    "extractor",  # an LM call extracted hints for a later generation (RSL-SQL's components)
    "selector",  # a selector chose among candidates
    "corrector",  # a corrector checked (and perhaps changed) the SQL
)


class Ran:
    """The stages one answer ran, in order: what the output contract's ``stages`` field holds.

    A program makes one per question (the program itself is shared between threads) and calls
    its stages through it: ``fixed = ran("corrector", self.corrector, sql=...)`` calls the stage
    and records ``"corrector"``, unless the stage declares ``is_noop``. A stage that is not called
    this way (a demo source, a sampler inside another stage) is noted with :meth:`record`.
    """

    def __init__(self) -> None:
        self.labels: list[str] = []

    def __call__(self, role: str, stage: Any, /, **inputs: Any) -> Any:
        """``stage(**inputs)``, recorded under ``role`` (a :data:`LABELS` entry)."""
        out = stage(**inputs)
        self.record(role, stage)
        return out

    def record(self, role: str, stage: Any = None) -> None:
        """Note that a ``role`` stage ran (nothing when ``stage`` declares ``is_noop``)."""
        if role not in LABELS:
            raise ValueError(f"unknown stage label {role!r}; choose one of {', '.join(LABELS)}")
        if stage is None or not declares(stage, "is_noop"):
            self.labels.append(role)

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return f"Ran({self.labels})"


def available(role: str | None = None) -> Any:
    """The implementation names of ``role``, or every role's when ``role`` is None."""
    if role is None:
        return {r: names.names() for r, names in STAGES.items()}
    return _names(role).names()


def _names(role: str) -> Registry:
    try:
        return STAGES[role]
    except KeyError:
        raise ValueError(f"unknown stage role {role!r}; choose one of {', '.join(ROLES)}") from None


def register(role: str, name: str, cls: type, *, replace: bool = False) -> None:
    """Register ``cls`` (a ``dspy.Module`` following ``role``'s protocol) as ``name``, so
    programs take it by name and compiled artefacts save it (``replace=True`` to overwrite)."""
    _names(role).register(name, cls, replace=replace)


def stage_class(role: str, name: str) -> type:
    """The class registered as ``name`` for ``role``; a ``ValueError`` names the choices."""
    return _names(role).load(name)


def build(
    role: str,
    spec: str | dspy.Module | None,
    *,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    **options: Any,
) -> dspy.Module:
    """The stage for ``spec``: a registry name built with ``options``, or a module used as is.

    ``settings`` maps registry names to the options only that implementation takes, so a
    program can configure its default stage (``settings={"execution": {"max_rounds": 1}}``)
    and still accept any other name in its place.

    ``None`` is what a program's saved switches hold for a stage that was passed as an instance
    of an unregistered class: it cannot be rebuilt from a file, so the error says to pass it again.
    """
    if isinstance(spec, dspy.Module):
        return spec
    if spec is None:
        raise ValueError(
            f"this program was built with its own {role} (an instance, which artefacts cannot "
            f"save): pass it again, e.g. {role}=MyStage(), or register its class with "
            f"sqlweave.programs.stages.register({role!r}, name, MyStage)"
        )
    if not isinstance(spec, str):
        raise TypeError(f"{role} must be a registry name or a dspy.Module, got {spec!r}")
    if role == "corrector" and SEPARATOR in spec:
        return Chain(chain_steps(spec, settings=settings), spec=spec)
    return stage_class(role, spec)(**options, **(settings or {}).get(spec, {}))


def chain_steps(
    spec: str | Iterable[str], *, settings: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dspy.Module]:
    """The correctors a chain spec names (``"rules+intersect"`` or its names), each built."""
    names = chain_names(spec) if isinstance(spec, str) else list(spec)
    return [build("corrector", name, settings=settings) for name in names]


def name_of(role: str, spec: str | dspy.Module) -> str | None:
    """The registry name of ``spec`` (a name, or an instance of a registered class), else None.

    Programs record this among their switches, so an artefact rebuilds the same stage; a user's
    own stage class has no name and is not saved (pass it again after loading). A corrector
    chain is named by its spec (``rules+intersect``), which rebuilds it.
    """
    if isinstance(spec, str):
        parts = chain_names(spec) if role == "corrector" and SEPARATOR in spec else [spec]
        for part in parts:
            stage_class(role, part)  # validates
        return spec
    name = _names(role).name_of(spec)
    rebuilt = getattr(spec, "spec", None)  # a chain built from names says how
    return name if name is not None or not isinstance(rebuilt, str) else rebuilt


def role_switches(**specs: str | dspy.Module) -> dict[str, str | None]:
    """``{role: registry name}`` for a program's switches: ``role_switches(linker=..., ...)``."""
    return {role: name_of(role, spec) for role, spec in specs.items()}


#: The most candidates one generator may draw for a question (the papers draw 5 to 20).
MAX_SAMPLES = 256


def check_samples(samples: Any, selector: str | dspy.Module | None = None) -> int:
    """``samples`` validated: the one check of every program's ``samples`` switch.

    An integer >= 1 (not a bool). With a ``selector`` (a program that adds sampled candidates to
    its own query): extra samples only matter when a selector chooses among the candidates; with
    ``first`` the greedy query would always win and the samples would be paid for and thrown
    away, so that combination is refused (the switch search records it as invalid rather than
    running it).
    """
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if samples > MAX_SAMPLES:  # 1e20 from a typo or a hand-edited artefact never finishes
        raise ValueError(f"samples must be at most {MAX_SAMPLES}, got {samples}")
    if selector is None:
        return samples
    chooser = stage_class("selector", selector) if isinstance(selector, str) else selector
    if samples > 1 and declares(chooser, "picks_first"):
        raise ValueError(
            "samples > 1 needs a selector that chooses among the candidates "
            "(selector='vote' or 'lm'); 'first' would keep the greedy query only"
        )
    return samples


def is_none(stage: Any) -> bool:
    """Whether ``stage`` is absent or declares ``is_noop`` (the ``none`` linker or corrector)."""
    return stage is None or declares(stage, "is_noop")


def link(
    linker: dspy.Module,
    *,
    question: str,
    db: Any,
    db_schema: str,
    evidence: str = "",
    sql: str = "",
    ran: Ran | None = None,
) -> Any:
    """Call ``linker`` with the role's protocol; None for the ``none`` linker (nothing to prune).

    The schema is introspected here (cached per database), so a program passes only its own
    schema text and, where it has one, the draft SQL the linker may read. ``ran`` records the
    call.
    """
    if is_none(linker):
        return None
    from sqlweave.schema import introspect

    out = linker(
        question=question,
        schema=introspect(db),
        sql=sql,
        db_schema=db_schema,
        evidence=evidence,
        dialect=db.dialect,
        db=db,
    ).linked
    if ran is not None:
        ran.record("linker", linker)
    return out


def linked_inputs(
    linker: dspy.Module,
    render: Callable[..., str],
    *,
    question: str,
    db: Any,
    evidence: str = "",
    ran: Ran | None = None,
) -> tuple[dict[str, Any], Any]:
    """A generator's inputs (``dialect``, ``db_schema``, ``question``, ``evidence``) and
    ``linker``'s link (:func:`link`, None for the ``none`` linker).

    ``render(db)`` is the schema the linker reads; when it linked any table, the prompt's schema
    is ``render(db, linked.all_tables)`` instead.
    """
    db_schema = render(db)
    linked = link(linker, question=question, db=db, db_schema=db_schema, evidence=evidence, ran=ran)
    if linked:
        db_schema = render(db, linked.all_tables)
    inputs = {
        "dialect": db.dialect,
        "db_schema": db_schema,
        "question": question,
        "evidence": evidence,
    }
    return inputs, linked


def _texts(items: Iterable[Any] | None, attr: str) -> list[str]:
    out = []
    for item in items or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping) or hasattr(item, "get"):
            out.append(str(item.get(attr, "")))
        else:
            out.append(str(getattr(item, attr, item)))
    return out


def result(
    sql: str,
    *,
    stages: Iterable[str],
    candidates: Iterable[str] | None = None,
    origins: Iterable[str] | None = None,
    linked: Any = None,
    demos: Iterable[Any] | None = None,
    history: Iterable[Any] | None = None,
    **extra: Any,
) -> dspy.Prediction:
    """A program's prediction in the output contract (module docstring), plus ``extra`` fields.

    ``linked`` may be a :class:`~sqlweave.programs.stages.linking.LinkedSchema` or a list of names;
    ``demos`` examples or their questions; ``candidates`` defaults to ``[sql]``. ``origins``
    (one per candidate: the generator that wrote it and how, e.g. ``"direct:greedy"``,
    ``"dubo_v1:sampled"``) becomes ``candidate_origins``, which evaluation records beside each
    candidate's verdict.
    """
    if linked is None:
        names: list[str] = []
    elif hasattr(linked, "names"):
        names = list(linked.names())
    else:
        names = [str(n) for n in linked]
    cands = [str(c) for c in candidates] if candidates is not None else [sql]
    if origins is not None:
        extra["candidate_origins"] = [str(o) for o in origins]
        if len(extra["candidate_origins"]) != len(cands):
            raise ValueError(
                f"{len(extra['candidate_origins'])} origins for {len(cands)} candidates"
            )
    return dspy.Prediction(
        sql=sql,
        stages=list(stages),
        candidates=cands,
        linked=names,
        demos=_texts(demos, "question"),
        history=[dict(h) if isinstance(h, Mapping) else h for h in history or []],
        **extra,
    )


__all__ = [
    "CAPABILITIES",
    "CONTRACT",
    "LABELS",
    "ROLES",
    "STAGES",
    "Ran",
    "available",
    "build",
    "chain_steps",
    "check_samples",
    "declares",
    "is_none",
    "link",
    "linked_inputs",
    "name_of",
    "register",
    "result",
    "role_switches",
    "stage_class",
]
