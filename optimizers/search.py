"""The switch search (``search``): compile the pipeline, not only its prompts.

A sqlweave program is a configuration of stages: ``weave`` has ``num_demos``, ``samples``,
``value_hints``, ``repair_rounds`` and ``schema_layout``; ``mage`` a demo ``strategy``; ``pet`` a
``consistency`` mode. :class:`SwitchSearch` searches those switches with Optuna: each trial
builds the program with one configuration (``programs.get(name, **switches)``), runs it on the
validation set and scores it by the metric (EX by default); the configuration with the best
score wins, the earliest one on a tie. The first trial is the student's own configuration, so
the search never returns a configuration that scored below it.

**Space.** ``space`` maps a switch to its choices (``{"num_demos": [0, 2, 4]}``); by default the
``SEARCH_SPACE`` the program's class declares beside its switches (all of them:
:data:`DEFAULT_SPACES`), so a new program brings its own. Every choice is checked by building the
program with it before any LM call. Switches outside the space keep the student's values.

**Sampler.** ``grid`` tries every configuration (the student's first, then the others in a
seeded order); ``tpe`` is Optuna's TPE sampler; ``random`` Optuna's random sampler; ``auto``
takes ``grid`` when the space has at most ``n_trials`` configurations, else ``tpe``. TPE and
random are reseeded with ``seed + trial number`` before each trial, so a trial's proposal depends
only on the seed and the trials before it: a resumed search proposes what the uninterrupted one
would have. A configuration proposed again is not run again: its score is reused. ``n_trials``
counts distinct configurations run.

**Cost.** ``val_size`` scores each trial on the first ``val_size`` validation examples only (the
validation run after the compile still uses all of them). Under a budget
(:class:`~sqlweave.optimizers.budget.Budgeted`) the search stops at the refused call and keeps
the best finished trial; the trial in flight is recorded as ``stopped``.

**Resume.** Under a checkpoint (:class:`~sqlweave.optimizers.checkpoint.Checkpointed`) every
scored validation question of every trial, and every finished trial, is written as it finishes.
A rerun rebuilds the Optuna study from the finished trials and goes on; of the trial in flight
when the process died only its unfinished question is asked again.

**Record.** ``details["search"]`` holds the space, the sampler, the chosen switches, the best
and baseline scores and the history: per trial its switches, score, LM calls, seconds and status
(``done``, ``repeat``, ``stopped``). :func:`sqlweave.compile` saves it in the artefact
(``meta.extra["details"]["search"]``) and ``sqlweave inspect`` prints it. The compiled program
is rebuilt from its switches alone, so the artefact loads where no training data is.

The search rebuilds the program from its switches: demos or instructions the student already has
are not carried over. Put it first in a sequence (``search+bootstrap``).
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import dspy
from tqdm.auto import tqdm

from sqlweave.optimizers.base import SQLTeleprompter
from sqlweave.optimizers.budget import BudgetExhausted, CallBudget, enforce
from sqlweave.optimizers.checkpoint import example_key
from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)


class _DefaultSpaces(Mapping[str, dict[str, tuple[Any, ...]]]):
    """Per registered program name, the space its class declares (``SEARCH_SPACE``, beside the
    program's switches): read from :data:`sqlweave.programs.PROGRAMS` when asked, so a program
    registered later is in it too, and a new program's space is written in one place."""

    def _spaces(self) -> dict[str, dict[str, tuple[Any, ...]]]:
        from sqlweave.programs import PROGRAMS

        spaces: dict[str, dict[str, tuple[Any, ...]]] = {}
        for name in PROGRAMS:
            declared = getattr(PROGRAMS[name], "SEARCH_SPACE", None)
            if declared and getattr(PROGRAMS[name], "name", name) == name:
                spaces[name] = dict(declared)
        return spaces

    def __getitem__(self, name: str) -> dict[str, tuple[Any, ...]]:
        return self._spaces()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._spaces())

    def __len__(self) -> int:
        return len(self._spaces())


#: Program name -> the switches searched by default and their choices, as each program declares
#: them (``SEARCH_SPACE``): a few of its documented switches and stage choices (``linker``,
#: ``selector``, ``corrector`` from :mod:`sqlweave.programs.stages`). Each program's own default
#: is among the choices, so the first trial is the program as it is. Switches that a program no
#: longer takes are dropped with a warning.
DEFAULT_SPACES: Mapping[str, dict[str, tuple[Any, ...]]] = _DefaultSpaces()

SAMPLERS = ("auto", "grid", "tpe", "random")

_SCALARS = (bool, int, float, str, type(None))


def _accepted_switches(program_cls: type) -> set[str] | None:
    """The switches ``program_cls`` takes, or None when it takes any (``**switches``)."""
    params = dict(inspect.signature(program_cls.__init__).parameters)
    params.pop("self", None)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def default_space(program: SQLProgram) -> dict[str, list[Any]]:
    """The default search space of ``program``: the ``SEARCH_SPACE`` its class declares, limited
    to the switches its constructor takes; ``ValueError`` when there is none."""
    name = getattr(program, "name", "")
    entry = getattr(type(program), "SEARCH_SPACE", None)
    if not entry:
        raise ValueError(
            f"program {name or type(program).__name__!r} has no default search space; pass "
            "space={switch: [choices]} (CLI: --space switch=a,b,c)"
        )
    accepted = _accepted_switches(type(program))
    space = {}
    for key, choices in entry.items():
        if accepted is not None and key not in accepted:
            logger.warning("default search space of %s: it has no switch %r; skipped", name, key)
            continue
        space[key] = list(choices)
    return space


def check_space(
    program: SQLProgram,
    space: Mapping[str, Sequence[Any]],
    build: Callable[..., SQLProgram],
) -> dict[str, list[Any]]:
    """``space`` as lists of distinct scalar choices, each of which builds ``program``'s class;
    ``ValueError`` naming the switch and the value otherwise."""
    name = getattr(program, "name", "") or type(program).__name__
    accepted = _accepted_switches(type(program))
    base = dict(getattr(program, "switches", {}))
    checked: dict[str, list[Any]] = {}
    for key, choices in space.items():
        if accepted is not None and key not in accepted:
            raise ValueError(
                f"search space: program {name} has no switch {key!r}; "
                f"its switches: {', '.join(sorted(accepted)) or 'none'}"
            )
        if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
            raise ValueError(f"search space: {key} needs a list of choices, not {choices!r}")
        distinct: list[Any] = []
        for value in choices:
            if not isinstance(value, _SCALARS) or (
                isinstance(value, float) and not math.isfinite(value)
            ):
                raise ValueError(
                    f"search space: {key}={value!r} is not a number, string, bool or None"
                )
            if not any(type(value) is type(v) and value == v for v in distinct):
                distinct.append(value)
        if not distinct:
            raise ValueError(f"search space: {key} has no choices")
        checked[key] = distinct
    if not checked:
        raise ValueError(f"search space of {name} is empty: nothing to search")
    for key, distinct in checked.items():
        for value in distinct:
            _check_choice(build, base, checked, key, value, name)
    return checked


def _check_choice(
    build: Callable[..., SQLProgram],
    base: dict[str, Any],
    space: dict[str, list[Any]],
    key: str,
    value: Any,
    name: str,
) -> None:
    """``ValueError`` unless ``key=value`` builds the program with the other switches as they
    are, or with some choice of the others (switches may depend on each other: ``samples=8``
    may need ``selector='vote'``, and the search then skips the combinations that do not build)."""
    try:
        build(**{**base, key: value})
        return
    except (TypeError, ValueError) as err:
        first = err
    others = [k for k in space if k != key]
    for values in itertools.product(*(space[k] for k in others)):
        try:
            build(**{**base, **dict(zip(others, values, strict=True)), key: value})
            return
        except (TypeError, ValueError):
            continue
    raise ValueError(f"search space: {name} cannot take {key}={value!r}: {first}") from first


def _config_id(params: Mapping[str, Any]) -> str:
    raw = json.dumps(sorted(params.items()), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def _as_score(value: Any) -> float:
    """A metric's value as a float (a GEPA-style metric returns a Prediction with ``score``)."""
    value = getattr(value, "score", value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@dataclass
class _Run:
    """One search's plan and what its trials did so far (``done`` and ``invalid`` by
    configuration id: the scored records, and why the program refused to build)."""

    space: dict[str, list[Any]]
    base: dict[str, Any]
    build: Callable[..., SQLProgram]
    val: list[dspy.Example]
    baseline: dict[str, Any] | None
    size: int
    kind: str
    grid: list[dict]
    history: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)


class SwitchSearch(SQLTeleprompter):
    """Optuna over a program's switches, scored on the validation set (module docstring).

    ``space``: switch -> choices (default: :func:`default_space`); ``n_trials``: distinct
    configurations to run (at least 1); ``val_size``: validation examples per trial (None: all);
    ``sampler``: one of :data:`SAMPLERS`; ``build``: how a configuration becomes a program
    (default: the registry entry of the student's name, else the student's class).
    """

    name = "search"
    replays = True  # every finished trial and question is a checkpointed unit

    def __init__(
        self,
        *,
        space: Mapping[str, Sequence[Any]] | None = None,
        n_trials: int = 8,
        val_size: int | None = None,
        sampler: str = "auto",
        build: Callable[..., SQLProgram] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if not isinstance(n_trials, int) or n_trials < 1:
            raise ValueError(f"n_trials must be 1 or more, not {n_trials!r}")
        if val_size is not None and (not isinstance(val_size, int) or val_size < 1):
            raise ValueError(f"val_size must be 1 or more (or None for all), not {val_size!r}")
        if sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
        for key, choices in (space or {}).items():
            if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
                raise ValueError(f"search space: {key} needs a list of choices, not {choices!r}")
        self.space = None if space is None else {k: list(v) for k, v in space.items()}
        self.n_trials = n_trials
        self.val_size = val_size
        self.sampler = sampler
        self.build = build

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "space": self.space,
            "n_trials": self.n_trials,
            "val_size": self.val_size,
            "sampler": self.sampler,
        }

    # --- building and scoring -------------------------------------------------------------

    def _builder(self, student: SQLProgram) -> Callable[..., SQLProgram]:
        if self.build is not None:
            return self.build
        from sqlweave import programs

        name = getattr(student, "name", "")
        if name in programs.available():
            return lambda **switches: programs.get(name, **switches)
        return lambda **switches: type(student)(**switches)

    def _score_one(self, program: SQLProgram, example: dspy.Example) -> float:
        try:
            pred = program(**example.inputs())
        except Exception as err:  # a program failure is a miss, as in evaluation
            logger.debug("trial program failed on %r: %s", example.get("question"), err)
            return 0.0
        try:
            return _as_score(self.metric(example, pred, None))
        except Exception as err:  # a metric that cannot score this output scores it 0
            logger.debug("metric failed on %r: %s", example.get("question"), err)
            return 0.0

    def _evaluate(
        self, program: SQLProgram, val: list[dspy.Example], cid: str, cap: CallBudget
    ) -> dict[str, Any]:
        """Mean score, LM calls and seconds of one configuration; each question a unit."""
        total, calls, seconds = 0.0, 0, 0.0
        ckpt = self.checkpoint
        for example in val:
            key = f"search:q:{cid}:{example_key(example)}"
            saved = ckpt.get(key) if ckpt is not None else None
            if saved is None:
                before, started = cap.calls, time.perf_counter()
                score = self._score_one(program, example)
                saved = {
                    "score": score,
                    "calls": cap.calls - before,
                    "seconds": round(time.perf_counter() - started, 3),
                }
                if ckpt is not None:
                    ckpt.put(key, saved)
            total += float(saved["score"])
            calls += int(saved["calls"])
            seconds += float(saved["seconds"])
        return {
            "score": total / len(val) if val else 0.0,
            "calls": calls,
            "seconds": round(seconds, 3),
        }

    # --- proposing --------------------------------------------------------------------------

    def _sampler_kind(self, size: int) -> str:
        if self.sampler != "auto":
            return self.sampler
        return "grid" if size <= self.n_trials else "tpe"

    def _grid(self, space: dict[str, list[Any]], baseline: dict[str, Any] | None) -> list[dict]:
        keys = list(space)
        grid = [
            dict(zip(keys, values, strict=True)) for values in itertools.product(*space.values())
        ]
        random.Random(self.seed).shuffle(grid)
        if baseline is not None:
            grid.sort(key=lambda params: params != baseline)  # stable: the baseline first
        return grid

    # --- the search -------------------------------------------------------------------------

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """The student rebuilt with the switches that scored best on ``valset`` (``trainset``
        when there is no validation set; only validation data is used)."""
        try:
            import optuna
        except ImportError as err:  # optuna is a core dependency; a broken install
            raise ImportError("the search optimizer needs optuna: pip install optuna") from err
        run = self._plan(student, valset if valset is not None else trainset)
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.budget_stopped = False
        try:
            self._search(optuna, run)
        finally:
            optuna.logging.set_verbosity(verbosity)
        return self._finish(student, run)

    def _plan(self, student: SQLProgram, examples: list[dspy.Example]) -> _Run:
        """The space (checked), the validation slice, the baseline and the sampler of a search."""
        build = self._builder(student)
        space = check_space(
            student, self.space if self.space is not None else default_space(student), build
        )
        base = dict(getattr(student, "switches", {}))
        if any(p.demos for _, p in student.named_predictors()):
            logger.warning(
                "the search rebuilds %s from its switches: the student's demos are not kept "
                "(run the search first, e.g. search+bootstrap)",
                getattr(student, "name", type(student).__name__),
            )
        val = list(examples)
        if self.val_size is not None:
            val = val[: self.val_size]
        if not val:
            raise ValueError("the search needs validation examples to score its trials")
        baseline: dict[str, Any] | None = {k: base[k] for k in space if k in base}
        if len(baseline) != len(space) or any(
            not any(type(baseline[k]) is type(c) and baseline[k] == c for c in space[k])
            for k in space
        ):
            baseline = None  # the student's configuration is not in the space
        size = math.prod(len(choices) for choices in space.values())
        kind = self._sampler_kind(size)
        grid = self._grid(space, baseline) if kind == "grid" else []
        return _Run(space, base, build, val, baseline, size, kind, grid)

    def _search(self, optuna: Any, run: _Run) -> None:
        """Propose, build and score configurations until ``n_trials`` are done (or the space,
        the proposals or the budget run out); every trial goes to ``run.history``."""
        distributions = {
            k: optuna.distributions.CategoricalDistribution(choices)
            for k, choices in run.space.items()
        }
        own_cap = self.budget is None
        cap = self.budget if self.budget is not None else CallBudget()
        study = optuna.create_study(direction="maximize")
        number = self._replay(study, distributions, run.history, run.done, run.invalid)
        limit = self.n_trials * 5 + 10  # proposals, repeats included: TPE may circle
        bar = tqdm(
            total=min(self.n_trials, run.size),
            initial=len(run.done),
            desc="trials",
            disable=not self.progress,
        )
        with enforce(cap) if own_cap else nullcontext():
            while (
                len(run.done) < min(self.n_trials, run.size - len(run.invalid)) and number < limit
            ):
                trial = self._propose(optuna, study, distributions, run, number)
                if not self._trial(optuna, study, trial, run, number, cap, bar):
                    break  # the budget stopped the trial in flight
                number += 1
        bar.close()

    def _propose(
        self, optuna: Any, study: Any, distributions: dict[str, Any], run: _Run, number: int
    ) -> Any:
        """The next trial: the grid's next untried configuration, or the seeded sampler's."""
        if run.kind == "grid":
            params = next(
                p
                for p in run.grid
                if _config_id(p) not in run.done and _config_id(p) not in run.invalid
            )
            study.enqueue_trial(params)
        else:
            if number == 0 and run.baseline is not None:
                study.enqueue_trial(run.baseline)
            study.sampler = self._optuna_sampler(optuna, number)
        return study.ask(distributions)

    def _trial(
        self,
        optuna: Any,
        study: Any,
        trial: Any,
        run: _Run,
        number: int,
        cap: CallBudget,
        bar: Any,
    ) -> bool:
        """Run (or reuse, or refuse) one proposed configuration and record it; False when the
        budget stopped it."""
        params = {k: trial.params[k] for k in run.space}
        cid = _config_id(params)
        record: dict[str, Any] = {"number": number, "switches": params}
        program = None
        if cid in run.done:
            first = run.done[cid]
            record.update(
                score=first["score"], calls=0, seconds=0.0, status="repeat",
                repeat_of=first["number"],
            )  # fmt: skip
        elif cid not in run.invalid:
            try:  # switches may depend on each other (samples > 1 needs a vote)
                program = run.build(**{**run.base, **params})
            except (TypeError, ValueError) as err:
                run.invalid[cid] = str(err)
        if cid in run.invalid:
            # A combination the program refuses: no LM call, not a trial.
            record.update(score=None, calls=0, seconds=0.0, status="invalid",
                          reason=run.invalid[cid])  # fmt: skip
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self._keep(run, number, record)
            return True
        if program is not None:
            try:
                result = self._evaluate(program, run.val, cid, cap)
            except BudgetExhausted:
                self.budget_stopped = True
                run.history.append({**record, "score": None, "status": "stopped"})
                return False
            record.update(result, status="done")
            run.done[cid] = record
            bar.update(1)
            bar.set_postfix(best=max(r["score"] for r in run.done.values()))
        study.tell(trial, record["score"])
        self._keep(run, number, record)
        return True

    def _keep(self, run: _Run, number: int, record: dict[str, Any]) -> None:
        """A finished trial: checkpointed (when there is a checkpoint) and in the history."""
        if self.checkpoint is not None:
            self.checkpoint.put(f"search:trial:{number}", record)
        run.history.append(record)

    def _finish(self, student: SQLProgram, run: _Run) -> SQLProgram:
        """``details["search"]`` from the history, and the best configuration rebuilt."""
        finished = [r for r in run.history if r["status"] == "done"]
        best = max(finished, key=lambda r: (r["score"], -r["number"]), default=None)
        chosen = dict(best["switches"]) if best is not None else {}
        baseline_score = next(
            (
                r["score"]
                for r in finished
                if run.baseline is not None and r["switches"] == run.baseline
            ),
            None,
        )
        self.details = {
            "search": {
                "program": getattr(student, "name", type(student).__name__),
                "space": run.space,
                "sampler": run.kind,
                "n_trials": self.n_trials,
                "n_val": len(run.val),
                "chosen": chosen,
                # what the program ran before, on the searched switches (its values, in the
                # space or not): "moved" and "kept" are read against it (cli.describe)
                "started_from": {k: run.base[k] for k in run.space if k in run.base},
                "best_score": best["score"] if best is not None else None,
                "baseline_score": baseline_score,
                "budget_stopped": self.budget_stopped,
                "trials": run.history,
            }
        }
        if best is None:
            logger.warning("the search finished no trial; the program is unchanged")
            return student.reset_copy()
        logger.info(
            "search chose %s (score %.3f over %d trials)", chosen, best["score"], len(finished)
        )
        return run.build(**{**run.base, **chosen})

    def _optuna_sampler(self, optuna: Any, number: int) -> Any:
        seed = self.seed + number
        if self.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        startup = min(10, max(2, self.n_trials // 2))
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)

    def _replay(
        self,
        study: Any,
        distributions: dict[str, Any],
        history: list[dict[str, Any]],
        done: dict[str, dict[str, Any]],
        invalid: dict[str, str],
    ) -> int:
        """Add the trials a checkpoint holds to ``study``; the number of the next trial."""
        import optuna

        number = 0
        while self.checkpoint is not None:
            record = self.checkpoint.get(f"search:trial:{number}")
            if record is None:
                break
            if record["status"] == "invalid":
                invalid[_config_id(record["switches"])] = record.get("reason", "")
                study.add_trial(
                    optuna.trial.create_trial(
                        params=record["switches"],
                        distributions=distributions,
                        state=optuna.trial.TrialState.FAIL,
                    )
                )
            else:
                study.add_trial(
                    optuna.trial.create_trial(
                        params=record["switches"],
                        distributions=distributions,
                        value=record["score"],
                    )
                )
            history.append(record)
            if record["status"] == "done":
                done[_config_id(record["switches"])] = record
            number += 1
        if number:
            logger.info("search: %d trials replayed from the checkpoint", number)
        return number
