"""One compile, whichever door it comes in by.

``sqlweave.compile(...)`` and ``sqlweave compile`` both build a :class:`CompilePlan` and run it, so
the same compile from Python and from the shell gives the same artefact. The plan is where the
compile's policy is written, once:

- **Data.** Train and validation data are examples (``dspy.Example``, dicts,
  :func:`sqlweave.Example`) or a :class:`Named` source: a benchmark (``spider``, ``bird``), a
  questions file, or for validation a named slice (``spider-train-val``). A named train source
  (thousands of questions) is drawn down to ``n_train`` questions, :data:`DEFAULT_N_TRAIN` unless
  said, by a seeded draw; examples passed in are used whole unless ``n_train`` is given (0: all).
- **Validation.** None given: :func:`default_validation`, questions on databases the demos never
  see, applied to the whole train pool before ``n_train`` draws from what is left. A named slice:
  its first ``n_val`` questions in the committed order, and train keeps none of its databases, so
  a choice made on it is one that carries over to databases never seen. Another named source: a
  seeded, stratified ``n_val`` of its dev split. Examples: used as given.
- **Overlap.** No validation question may also be a train question
  (:func:`~sqlweave.data.assert_disjoint`): demos drawn from train would inflate the score. Data
  the plan reads or splits must not overlap (a :class:`~sqlweave.data.DataError`); two lists the
  caller gives both are theirs, and an overlap is a warning.
- **No labelled questions.** ``db`` with ``synthesize=N``: N pairs per database made with the
  configured LM (:mod:`sqlweave.synthesis.sets`), their recipe following the optimizer
  (:func:`~sqlweave.synthesis.sets.synthesis_defaults`).
- **Provenance.** The artefact records how validation was chosen (``meta.extra["validation"]``),
  the configured LM's spec, the proposer's name, the preset, the synthetic set and the confidence
  refitted on the validation answers.

:meth:`CompilePlan.build` does all that needs no LM (arguments checked, the program built, the data
read and split, the databases opened), so a front end fails before a model loads;
:meth:`Compile.run` synthesizes (when asked), optimizes, validates and returns the program.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import dspy

from sqlweave.compiled import CompiledProgram, _as_program, _given, preset_meta
from sqlweave.db import Database
from sqlweave.optimizers.artifact import MAX_DEMOS, ArtifactMeta, trainset_hash
from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

#: Demonstrations per predictor: one default for ``sqlweave.compile`` and ``sqlweave compile``.
DEFAULT_MAX_DEMOS = 2
#: Validation questions the default validation policy (and a named validation source) takes.
DEFAULT_N_VAL = 20
#: Train questions drawn from a named train source (``spider``: 7,000 questions) by default.
DEFAULT_N_TRAIN = 24
#: The named slice whose databases no default demo pool uses (:func:`sqlweave.data.load_slice`).
HELD_OUT_SLICE = "spider-train-val"


@dataclass(frozen=True)
class Named:
    """Data named, not given: ``spider``, ``bird``, a questions file (.json/.jsonl) or, for
    validation, a named slice (:data:`sqlweave.data.SLICES`); read from ``root`` (default: the
    bundled data)."""

    name: str
    root: Path | None = None

    def load(self, split: str) -> list[dspy.Example]:
        """The source's ``split`` (a questions file has one)."""
        from sqlweave import data

        if self.name == "spider":
            return data.load_spider(split=split, root=self.root)
        if self.name == "bird":
            return data.load_bird(split=split, root=self.root)
        return data.load_questions(Path(self.name))

    def is_slice(self) -> bool:
        from sqlweave.data import SLICES

        return self.name in SLICES


Data = Sequence[dspy.Example | dict[str, Any]] | Named


def default_validation(
    trainset: Sequence[dspy.Example], *, n_val: int = DEFAULT_N_VAL, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example], str]:
    """The compile policy when no validation set is given: ``(train, val, how)``.

    A compile should choose what carries over to databases it has not seen, as a user's are, so
    validation questions come from databases the demo pool never sees. Spider train questions
    validate on the first ``n_val`` of ``spider-train-val`` (train keeps none of its databases)
    where that slice's databases exist; any other train set holds out whole databases, drawn in
    a seeded order until they hold a fifth of the questions, and validates on up to ``n_val`` of
    theirs; a train set on one database falls back to a seeded fifth of its questions.
    """
    trainset = list(trainset)
    held_out = _held_out_slice(trainset, n_val)
    if held_out is not None:
        return held_out
    databases = sorted({str(ex.get("db_id")) for ex in trainset})
    if len(databases) < 2:
        from sqlweave.optimizers.compile import split_train_val

        train, val = split_train_val(trainset, seed=seed)
        return train, val[: n_val or None], "a seeded 20% of the train questions (one database)"
    random.Random(f"validation:{seed}").shuffle(databases)
    held: set[str] = set()
    count = 0
    for db_id in databases[:-1]:  # at least one database stays for the demos
        if count * 5 >= len(trainset):
            break
        held.add(db_id)
        count += sum(str(ex.get("db_id")) == db_id for ex in trainset)
    val = [ex for ex in trainset if str(ex.get("db_id")) in held]
    train = [ex for ex in trainset if str(ex.get("db_id")) not in held]
    random.Random(seed).shuffle(val)
    return (
        train,
        val[: n_val or None],
        f"{len(held)} held-out train database(s) the demos never saw",
    )


def _held_out_slice(
    trainset: list[dspy.Example], n_val: int
) -> tuple[list[dspy.Example], list[dspy.Example], str] | None:
    """Spider train questions validate on :data:`HELD_OUT_SLICE` (None: not Spider train, or
    the slice's databases are not beside them)."""
    from sqlweave.data import DataError, load_slice

    if not trainset or not all(
        ex.get("source") == "spider" and ex.get("split") == "train" for ex in trainset
    ):
        return None
    # The slice's questions come from the same Spider folder as the train questions
    # (<spider>/database/<db_id>/<db_id>.sqlite): no such path, no slice.
    parents = Path(str(trainset[0].get("db_path") or "")).parents
    try:
        whole = load_slice(HELD_OUT_SLICE, root=parents[2]) if len(parents) > 2 else []
    except DataError:
        whole = []
    held = {ex.db_id for ex in whole}
    train = [ex for ex in trainset if ex.db_id not in held]
    if not whole or not train:
        return None
    return train, whole[: n_val or None], f"{HELD_OUT_SLICE}, databases the demos never saw"


#: The :class:`CompilePlan` fields that :func:`~sqlweave.optimizers.compile.run_optimizer`
#: takes as they are, under the same names.
OPTIMIZER_FIELDS = tuple(
    "optimizer metric budget max_demos seed proposer_lm checkpoint progress candidates".split()
)


@dataclass
class CompilePlan:
    """Everything a compile is asked (see the module doc for the policy applied to it).

    ``program``: an instance, an artefact path or a registry name built with ``switches``;
    ``preset``: a named configuration (neither: the default preset). ``trainset``/``valset``:
    examples or :class:`Named` sources. ``db`` with ``synthesize=N``: no labelled questions,
    pairs made for each database instead. The rest go to the optimizer
    (:func:`sqlweave.optimizers.compile.run_optimizer`).
    """

    program: SQLProgram | CompiledProgram | str | Path | None = None
    trainset: Data | None = None
    valset: Data | None = None
    preset: str | None = None
    switches: dict[str, Any] = field(default_factory=dict)
    n_train: int | None = None
    n_val: int | None = None
    db: Database | str | Path | Sequence[Database | str | Path] | None = None
    synthesize: int | None = None
    synthetic_out: str | Path | None = None
    synthesis_check: bool | None = None
    synthetic_val_fraction: float | None = None
    optimizer: str = "bootstrap"
    metric: Callable[..., Any] | None = None
    budget: int | None = None
    max_demos: int = DEFAULT_MAX_DEMOS
    seed: int = 0
    proposer_lm: Any = None
    checkpoint: str | Path | None = None
    progress: bool = True
    candidates: int = 2
    options: dict[str, Any] = field(default_factory=dict)

    def run(self) -> CompiledProgram:
        """Build the compile and run it."""
        return self.build().run()

    def build(self) -> Compile:
        """The compile resolved: arguments checked, program built, data read and split,
        databases opened; no LM call. Raises ``TypeError`` for a setting of the wrong type,
        ``ValueError`` (a :class:`~sqlweave.data.DataError` for data) naming what is wrong."""
        from sqlweave.examples import as_examples

        self._check_types()
        self._check_sources()
        given_val = None if self.valset is None or isinstance(self.valset, Named) else self.valset
        if given_val is not None:
            given_val = as_examples(given_val, what="valset")
        recipe = self._recipe()
        n_val = DEFAULT_N_VAL if recipe["n_val"] is None else recipe["n_val"]
        if self.max_demos < 0 or n_val < 0:
            raise ValueError(
                f"max_demos and n_val must be 0 or more, not {self.max_demos} and {n_val}"
            )
        if self.max_demos > MAX_DEMOS:
            raise ValueError(f"max_demos must be at most {MAX_DEMOS}, not {self.max_demos}")
        if self.n_train is not None and self.n_train < 0:
            raise ValueError(f"n_train must be 0 or more, not {self.n_train}")
        student, name, preset_name = self._student()
        built = Compile(self, student, name, preset_name, n_val=n_val, **recipe["synthesis"])
        if self.synthesize is not None:
            from sqlweave.synthesis.sets import open_databases

            built.valset = given_val if given_val is not None else self._named_val(n_val)
            built.databases = open_databases(self.db)
        else:
            built.trainset, built.valset, built.how = self._labelled(n_val, given_val)
        # before the model loads: a database that does not open is the data's mistake
        check_databases([*built.trainset, *(built.valset or [])])
        self._check_proposer()
        return built

    def _check_types(self) -> None:
        """Each scalar setting of the type it must have (a bool is no number here): a compile
        given ``budget="5"`` or ``optimizer=None`` stops with one line naming the argument,
        not with a traceback from inside the optimizer minutes later."""
        for name, kinds, what in _SETTING_TYPES:
            value = getattr(self, name)
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                raise TypeError(f"compile: {name} must be {what}, not {value!r}")
        if self.metric is not None and not callable(self.metric):
            raise TypeError(f"compile: metric must be a function or None, not {self.metric!r}")
        if self.candidates < 1:
            raise ValueError(f"compile: candidates must be at least 1, not {self.candidates}")

    def _check_sources(self) -> None:
        """Train data or ``db`` with ``synthesize``, never both."""
        if self.synthesize is not None or self.db is not None:
            if self.trainset is not None:
                raise ValueError(
                    "give a trainset or db= with synthesize=N, not both (to combine them, "
                    "synthesize to a file with sqlweave.synthesize and pass both as trainset)"
                )
            if self.synthesize is None or self.db is None:
                raise ValueError(
                    "db= and synthesize=N go together: N pairs for each database in db"
                )
            if self.n_train is not None:
                raise ValueError("n_train applies to a trainset; synthesize=N sets the pairs")
        elif self.trainset is None:
            raise ValueError(
                "compile needs a trainset, or db=PATH_OR_URL and synthesize=N to make one"
            )

    def _recipe(self) -> dict[str, Any]:
        """``n_val`` and the synthesis settings, the caller's or the optimizer's defaults."""
        n_val = self.n_val
        if self.synthesize is None:
            return {"n_val": n_val, "synthesis": {}}
        from sqlweave.synthesis.sets import check_val_fraction, synthesis_defaults

        recipe = synthesis_defaults(self.optimizer, valset_given=self.valset is not None)
        fraction = self.synthetic_val_fraction
        fraction = recipe.val_fraction if fraction is None else check_val_fraction(fraction)
        if n_val is None and recipe.n_val is not None:
            n_val = recipe.n_val
        check = recipe.check if self.synthesis_check is None else self.synthesis_check
        return {"n_val": n_val, "synthesis": {"check": check, "val_fraction": fraction}}

    def _student(self) -> tuple[SQLProgram, str, str | None]:
        """The program to compile, the name its artefact records, and the preset it came from."""
        from sqlweave.programs import available

        program = self.program
        if _given(program):
            student = _as_program(program, self.switches, self.preset)
            if isinstance(program, CompiledProgram):
                return student, program.meta.program, None
        else:  # built once, from a name or a preset: the preset's name goes into the artefact
            student, meta = preset_meta(program, self.preset, self.switches)
            program = meta.program
            return student, meta.program, meta.extra.get("preset")
        if isinstance(program, str) and program in available():
            return student, program, None
        return student, getattr(student, "name", type(student).__name__), None

    def _named_val(self, n_val: int) -> list[dspy.Example] | None:
        """A :class:`Named` validation source's questions (None when none was named)."""
        from sqlweave.data import eval_slice, load_slice
        from sqlweave.examples import as_examples

        val = self.valset
        if not isinstance(val, Named):
            return None
        if val.is_slice():
            return as_examples(load_slice(val.name, root=val.root)[: n_val or None], what="valset")
        examples = eval_slice(val.load("dev"), n=n_val or None, seed=self.seed)
        return as_examples(examples, what=f"valset {val.name}")

    def _labelled(
        self, n_val: int, given_val: list[dspy.Example] | None
    ) -> tuple[list[dspy.Example], list[dspy.Example], str]:
        """Train and validation examples from labelled data, and how validation was chosen."""
        from sqlweave.data import DataError, assert_disjoint, eval_slice, load_slice
        from sqlweave.examples import as_examples

        train, val = self.trainset, self.valset
        named = isinstance(train, Named)
        what = f"trainset {train.name}" if named else "trainset"
        pool = as_examples(train.load("train") if named else train, what=what)
        how = "given"
        if val is None:  # applied to the whole pool before n_train draws from what is left
            pool, valset, how = default_validation(pool, n_val=n_val, seed=self.seed)
            logger.info("validating on %s", how)
        elif isinstance(val, Named) and val.is_slice():
            whole = load_slice(val.name, root=val.root)
            held = {ex.db_id for ex in whole}
            pool = [ex for ex in pool if ex.db_id not in held]
            valset = as_examples(whole[: n_val or None], what=f"valset {val.name}")
        else:
            valset = given_val if given_val is not None else self._named_val(n_val)
        n_train = DEFAULT_N_TRAIN if self.n_train is None and named else self.n_train
        trainset = eval_slice(pool, n=n_train or None, seed=self.seed, stratify=None)
        try:
            assert_disjoint(trainset, valset)
        except DataError as err:
            if named or given_val is None:
                raise
            # Both lists are the caller's (a test may validate on train on purpose): say so.
            logger.warning("validation overlaps train, its score flatters the program: %s", err)
        return trainset, list(valset), how

    def _check_proposer(self) -> None:
        """A proposer named by a spec string is checked now; the optimizer builds it."""
        if isinstance(self.proposer_lm, str):
            from sqlweave.lm.spec import LMSpec

            LMSpec.parse(self.proposer_lm)


@dataclass
class Compile:
    """A built :class:`CompilePlan`: the student, its data, and what the artefact records."""

    plan: CompilePlan
    student: SQLProgram
    name: str
    preset: str | None
    n_val: int
    check: bool = True
    val_fraction: float = 0.0
    trainset: list[dspy.Example] = field(default_factory=list)
    valset: list[dspy.Example] | None = None
    how: str = "given"
    databases: list[Database] = field(default_factory=list)

    def _optimizer_kwargs(self) -> dict[str, Any]:
        """:func:`~sqlweave.optimizers.compile.run_optimizer`'s keyword arguments: the plan's
        fields of the same names, then its options; a switch search from a preset with no space
        of its own searches the preset's database-dependent switches
        (:func:`presets.search_space`)."""
        from sqlweave.optimizers.registry import stage_names
        from sqlweave.programs.presets import search_space

        options = dict(self.plan.options)
        if "space" not in options and "search" in stage_names(self.plan.optimizer):
            space = search_space(self.preset)
            if space:
                options["space"] = space
        return {**{name: getattr(self.plan, name) for name in OPTIMIZER_FIELDS}, **options}

    def run(self) -> CompiledProgram:
        """Synthesize (when asked), optimize, score on validation; the program and its
        provenance."""
        from sqlweave.optimizers.compile import run_optimizer

        plan = self.plan
        synthetic = self._synthesize() if self.databases else None
        if synthetic is not None:  # the labelled questions' databases were opened by build()
            check_databases([*self.trainset, *(self.valset or [])])
        outcome = run_optimizer(
            self.student, self.trainset, self.valset, **self._optimizer_kwargs()
        )
        validation = _validate(outcome.program, self.valset or [], progress=plan.progress)
        meta = self._meta(outcome, validation, synthetic)
        logger.info(
            "compiled %s with %s: %d LM calls, %.1fs, validation EX %s%%",
            meta.program,
            plan.optimizer,
            outcome.report.lm_calls,
            outcome.report.seconds,
            "n/a" if meta.val_ex_pct is None else f"{meta.val_ex_pct:.1f}",
        )
        return CompiledProgram(outcome.program, meta)

    def _synthesize(self) -> Any:
        """Pairs for each database; they become train (and validation, when none was given)."""
        from sqlweave.synthesis.sets import synthetic_sets

        plan = self.plan
        if dspy.settings.lm is None:
            raise ValueError(
                "synthesize=N writes questions with the configured LM, and none is: call "
                "sqlweave.configure(MODEL) first"
            )
        if self.check and self.valset is None and "search" in plan.optimizer.split("+"):
            logger.warning(
                "the switch search validates on synthesized pairs the round trip kept: those are "
                "the questions %s as it is already answers, so no other configuration can beat "
                "it there; synthesize without the round trip (synthesis_check=False, "
                "--no-synthesis-check) for a search",
                getattr(self.student, "name", "the program"),
            )
        synthetic = synthetic_sets(
            self.databases,
            plan.synthesize,
            out=plan.synthetic_out,
            seed=plan.seed,
            n_val=self.n_val,
            val_fraction=self.val_fraction,
            check=self.check,
            progress=plan.progress,
        )
        if self.valset is not None:  # validation given: every pair trains
            self.trainset = synthetic.train + synthetic.val
        else:
            self.trainset, self.valset = synthetic.train, list(synthetic.val)
            self.how = (
                f"a seeded {100 * self.val_fraction:g} % of each database's synthesized pairs"
                f"{'' if self.check else ' (no round trip)'}"
            )
        return synthetic

    def _meta(self, outcome: Any, validation: dict[str, Any], synthetic: Any) -> ArtifactMeta:
        """The artefact's provenance."""
        plan, report = self.plan, outcome.report
        switches = getattr(outcome.program, "switches", getattr(self.student, "switches", {}))
        proposer = plan.proposer_lm if isinstance(plan.proposer_lm, str) else None
        return ArtifactMeta(
            program=self.name,
            switches=dict(switches),
            lm=_lm_spec(),
            optimizer=plan.optimizer,
            trainset_hash=trainset_hash(self.trainset),
            val_ex_pct=validation["val_ex_pct"],
            budget=plan.budget,
            lm_calls=report.lm_calls,
            compile_seconds=report.seconds,
            n_train=len(self.trainset),
            n_val=len(self.valset or []),
            extra={
                "max_demos": plan.max_demos,
                "seed": plan.seed,
                "validation": self.how,
                "budget_exhausted": report.budget_exhausted,
                "cached_calls": report.cached_calls,
                "resumed_units": report.resumed_units,
                "resumed_calls": report.resumed_calls,
                "val_lm_calls": validation["val_calls"],
                "proposer_lm": proposer,
                **({"details": report.details} if report.details else {}),
                **({"synthetic": synthetic.record} if synthetic is not None else {}),
                **({"preset": self.preset} if self.preset is not None else {}),
                **({"confidence": validation["refit"]} if validation["refit"] is not None else {}),
            },
        )


#: CompilePlan's scalar settings: (name, the types it may take, how the error names them).
_SETTING_TYPES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("preset", (str, type(None)), "a preset's name or None"),
    ("optimizer", (str,), "an optimizer's name ('bootstrap', 'search+bootstrap', ...)"),
    ("n_train", (Integral, type(None)), "a whole number or None"),
    ("n_val", (Integral, type(None)), "a whole number or None"),
    ("synthesize", (Integral, type(None)), "a whole number of pairs or None"),
    ("synthetic_out", (str, os.PathLike, type(None)), "a path or None"),
    ("synthesis_check", (bool, type(None)), "True, False or None"),
    ("synthetic_val_fraction", (Real, type(None)), "a share between 0 and 1 or None"),
    ("budget", (Integral, type(None)), "a whole number of LM calls or None"),
    ("max_demos", (Integral,), "a whole number"),
    ("seed", (Integral,), "a whole number"),
    ("checkpoint", (str, os.PathLike, type(None)), "a path or None"),
    ("progress", (bool,), "True or False"),
    ("candidates", (Integral,), "a whole number"),
    ("options", (dict,), "a dict of optimizer options"),
)


def check_databases(examples: Sequence[dspy.Example]) -> None:
    """Every database the questions name opens, before any LM call: one that does not would
    score each of its questions as a miss, and a compile would choose on zeros (``evaluate``'s
    command asks the same of its questions: a run of misses that exits 0 reads as a score)."""
    from sqlweave.data import DataError, open_database
    from sqlweave.db import ExecutionError
    from sqlweave.synthesis.sets import redact

    seen: set[str] = set()
    for example in examples:
        ref = str(example.get("db_path") or example.get("db_id") or "")
        if ref in seen:
            continue
        seen.add(ref)
        try:
            open_database(example)
        except (ExecutionError, DataError) as err:
            message = err.message if isinstance(err, ExecutionError) else str(err)
            raise DataError(
                None,
                f"question {example.get('question_id', '?')} names a database that does not "
                f"open ({redact(ref)}): {message}",
            ) from err


def _validate(program: SQLProgram, valset: list[dspy.Example], *, progress: bool) -> dict[str, Any]:
    """Validation EX (percent; None without questions), its LM calls, and the confidence
    refitted on its answers."""
    from sqlweave.evaluate import evaluate
    from sqlweave.lm import track_usage
    from sqlweave.programs.stages.confidence import record_confidence

    if not valset:
        return {"val_ex_pct": None, "val_calls": 0, "refit": None}
    with track_usage() as usage:
        summary = evaluate(
            program, valset, out_path=None, progress=progress, judge=record_confidence
        )
    return {
        "val_ex_pct": 100 * summary["ex"],
        "val_calls": usage.calls,
        "refit": _refit_confidence(summary["records"]),
    }


def _refit_confidence(records: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """The confidence refitted on the compile's validation answers (Platt scaling of the
    shipped model, :func:`sqlweave.confidence.recalibrate`), or None when too few."""
    from sqlweave.confidence import recalibrate

    judged = [r for r in records if isinstance(r.get("confidence"), int | float)]
    return recalibrate(
        [float(r["confidence"]) for r in judged], [bool(r.get("correct")) for r in judged]
    )


def _lm_spec() -> str | None:
    """The configured LM's spec string (its model name when it has no spec)."""
    from sqlweave.lm import LMSpecError, spec_of

    lm = dspy.settings.lm
    if lm is None:
        return None
    try:
        return spec_of(lm)
    except (LMSpecError, AttributeError):
        return getattr(lm, "model", None)
