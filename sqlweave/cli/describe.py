"""What an artefact says about its compile, as lines of text: the synthetic set, the switch
search, what compiling changed against the uncompiled program, the preset, and why a compile
that changed nothing kept the program as it was (``compile`` and ``inspect`` print these)."""

from __future__ import annotations

from typing import Any


def synthetic_lines(meta: Any) -> list[str]:
    """What an artefact compiled on synthesized pairs records of them: the set's size, sha256
    and split, then each database (password redacted) with its pairs file; none otherwise."""
    synthetic = meta.extra.get("synthetic")
    if not isinstance(synthetic, dict):
        return []
    lines = [
        f"synthetic set: {synthetic.get('n_pairs')} pairs ({synthetic.get('n_train')} train, "
        f"{synthetic.get('n_val')} validation), sha256 {synthetic.get('sha256')}"
    ]
    for entry in synthetic.get("databases") or []:
        if isinstance(entry, dict):
            lines.append(
                f"  database {entry.get('db')}: {entry.get('n_pairs')} pairs in {entry.get('file')}"
            )
    return lines


def switch_text(switches: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in switches.items()) or "(no switch)"


def search_lines(search: dict[str, Any]) -> list[str]:
    """The switch search of an artefact: its space, choice and one line per trial."""

    def pct(value: Any) -> str:
        return "   n/a" if value is None else f"{value * 100:6.1f}"

    lines = [
        f"space: {switch_text({k: ','.join(map(str, v)) for k, v in search['space'].items()})}",
        f"sampler {search.get('sampler')}, {search.get('n_trials')} trials asked, "
        f"{search.get('n_val')} validation examples per trial",
        f"chosen: {switch_text(search.get('chosen') or {})} (score {pct(search.get('best_score')).strip()}"
        + (
            f", the program's own switches {pct(search['baseline_score']).strip()})"
            if search.get("baseline_score") is not None
            else ")"
        ),
        "   #  score  calls  seconds  status  switches",
    ]
    for trial in search.get("trials", []):
        status = trial.get("status", "")
        if status == "repeat":
            status = f"= #{trial.get('repeat_of')}"
        lines.append(
            f"{trial.get('number', 0):4d} {pct(trial.get('score'))} {trial.get('calls', 0):6d} "
            f"{trial.get('seconds', 0.0):8.1f}  {status:<7} {switch_text(trial.get('switches', {}))}"
        )
    return lines


def diff_lines(program: Any, meta: Any) -> list[str]:
    """What compiling changed against the uncompiled program of the same name and switches."""
    from sqlweave import programs

    base = dict(programs.get(meta.program, **meta.switches).named_predictors())
    lines = []
    for pname, predictor in program.named_predictors():
        original = base.get(pname)
        if original is None:
            lines.append(f"  [{pname}] not in the uncompiled program")
            continue
        before = original.signature.instructions
        after = predictor.signature.instructions
        if before != after:
            lines.append(f"  [{pname}] instructions changed:")
            lines += [f"    - {line}" for line in before.splitlines()]
            lines += [f"    + {line}" for line in after.splitlines()]
        else:
            lines.append(f"  [{pname}] instructions unchanged")
        added = len(predictor.demos) - len(original.demos)
        lines.append(
            f"  [{pname}] demos: {len(original.demos)} -> {len(predictor.demos)} ({added:+d})"
        )
    return lines


def search_of(meta: Any) -> dict[str, Any]:
    search = (meta.extra.get("details") or {}).get("search")
    return search if isinstance(search, dict) else {}


def search_moved(meta: Any) -> dict[str, Any]:
    """The switches a switch search chose away from the program it started from (recorded as
    ``started_from``; an artefact of an older release: its first trial, which was the program
    whenever the program's switches lay in the space); empty when it kept them or there was no
    search."""
    search = search_of(meta)
    start = search.get("started_from")
    if not isinstance(start, dict):
        trials = search.get("trials") or []
        start = trials[0].get("switches", {}) if trials and isinstance(trials[0], dict) else {}
    chosen = search.get("chosen") or {}
    return {k: v for k, v in chosen.items() if start.get(k, v) != v}


def switch_changes(meta: Any) -> list[str]:
    """Switches of the artefact that differ from the program's defaults,
    ``name: default -> now`` and who changed it: the search (a switch it moved, or one its
    space gave a choice of values; a grid's first trial need not be the program as given), the
    search's space holding one value, or the user before compiling (``--set``)."""
    from sqlweave import programs

    try:
        defaults = programs.get(meta.program).switches
    except Exception:  # a program that cannot be built here: nothing to compare with
        return []
    moved = search_moved(meta)
    space = search_of(meta).get("space") or {}

    def who(key: str) -> str:
        if key in moved or len(space.get(key) or ()) > 1:
            return "(chosen by the search)"
        if key in space:
            return "(fixed in the search's space)"
        return "(set before compiling)"

    return [
        f"{key}: {defaults.get(key, '(none)')} -> {value} {who(key)}"
        for key, value in meta.switches.items()
        if defaults.get(key) != value
    ]


def summary_lines(program: Any, meta: Any, payload: dict[str, Any]) -> list[str]:
    """The head of ``inspect``: provenance in two lines, then what compiling changed."""
    pct = "n/a" if meta.val_ex_pct is None else f"{meta.val_ex_pct:.1f}%"
    how = meta.extra.get("validation")
    lines = [
        f"{meta.program} compiled with {meta.optimizer or '?'} on {meta.n_train} train "
        f"examples, model {meta.lm or '?'}: {meta.lm_calls or 0} LM calls, "
        f"{meta.compile_seconds or 0:.0f} s",
        f"validation EX {pct} (n={meta.n_val})"
        + (f" on {how}" if how and how != "given" else "")
        + f"; sqlweave {payload.get('versions', {}).get('sqlweave', '?')}",
        *synthetic_lines(meta),
        *preset_lines(meta),
        "",
        "what compile changed:",
    ]
    switches = switch_changes(meta)
    lines += [f"  switch {line}" for line in switches] or ["  switches: the program's defaults"]
    lines += diff_lines(program, meta)
    if "knn" in payload:
        lines.append(
            f"  demos per question: the {payload['knn']['k']} nearest of "
            f"{len(payload['knn']['pool'])} train demos (knn)"
        )
    if kept_defaults_line(meta, program) is not None and "knn" not in payload:
        lines.append("  nothing: the compile kept the uncompiled program (see the search below)")
    return lines


def preset_lines(meta: Any) -> list[str]:
    """The preset the compile started from (its switches as the preset defines them today)."""
    name = meta.extra.get("preset")
    if not name:
        return []
    from sqlweave.programs.presets import PRESETS

    known = PRESETS.get(name)
    return [f"started from preset {name!r}" + (f": {known.describe()}" if known else "")]


def _figures(label: str, figures: Any) -> str:
    if not isinstance(figures, dict):
        return f"  {label}"
    return (
        f"  {label}: fitted on {figures.get('n', '?'):,} train-side answers; out of fold AUROC "
        f"{figures.get('auroc', float('nan')):.3f}, calibration error "
        f"{figures.get('ece', float('nan')):.3f}"
    )


def _weights(model: Any) -> str:
    terms = [f"{k} {v:+.2f}" for k, v in (model.get("weights") or {}).items()]
    return "    " + ", ".join(terms) + f" (bias {model.get('bias', 0.0):+.2f})"


def confidence_lines(meta: Any) -> list[str]:
    """Where each answer's confidence comes from: the shipped logistic models (their weights and
    train-side figures), the threshold under which ``ask`` says "not sure", and the Platt
    refit this compile made on its own validation answers, if any."""
    from sqlweave.confidence import WEIGHTS_FILE, packaged_card

    card = packaged_card()
    models = card.get("models") or {}
    prov = card.get("provenance") or {}
    lines = [f"shipped with sqlweave ({WEIGHTS_FILE.name}), a logistic model of the pool:"]
    if "pool" in models:
        lines.append(_figures("several candidates (pool)", prov.get("pool_out_of_fold")))
        lines.append(_weights(models["pool"]))
    if "single" in models:
        single = (prov.get("single_kept") or {}).get("single_out_of_fold")
        lines.append(_figures("one candidate (single)", single))
        lines.append(_weights(models["single"]))
    threshold = float(card.get("threshold", 1.0))
    above = prov.get("pool_out_of_fold") or {}
    line = f"  'not sure' below {threshold:.3f}"
    if above.get("coverage_above") is not None and above.get("precision_above") is not None:
        line += (
            f": {above['coverage_above']:.1f} % of train-side answers above it, "
            f"{above['precision_above']:.1f} % of those right"
        )
    lines.append(line)
    refit = meta.extra.get("confidence")
    if refit:
        lines.append(
            f"  this compile refitted it on {int(refit['n'])} validation answers "
            f"(Platt: a {refit['a']:.2f}, b {refit['b']:+.2f})"
        )
    else:
        from sqlweave.confidence import MIN_REFIT

        lines.append(
            f"  this compile did not refit it (that takes {MIN_REFIT} validation answers, "
            "right and wrong ones)"
        )
    return lines


def changed(switches: list[str], diff: list[str]) -> bool:
    """Whether compiling changed anything: a switch, an instruction or a demo count."""
    return bool(switches) or any(
        "instructions changed" in line or (" demos: " in line and not line.endswith("(+0)"))
        for line in diff
    )


def kept_defaults_line(meta: Any, program: Any) -> str | None:
    """One line when a compile changed nothing a user can see, saying why; else None.

    Switches set before compiling (``--set``) are the user's, not the compile's: what counts is
    a demo, an instruction, a KNN pool or a switch the search moved. A ``knn`` compile's demos
    are picked per question at call time (the program's ``knn_pool``), not stored on its
    predictors, so the pool itself is what it changed."""
    if (
        meta.extra.get("details", {}).get("knn")
        or (getattr(program, "knn_pool", None) or {}).get("pool")
        or search_moved(meta)
        or changed([], diff_lines(program, meta))
    ):
        return None
    search = search_of(meta)
    trials = [t for t in search.get("trials", []) if t.get("score") is not None]
    # here the search chose the program's own switches (nothing moved): its trial is the
    # chosen one, wherever it stood in the history (a grid puts it first only when the
    # program's switches lie in the space)
    chosen = search.get("chosen", trials[0].get("switches") if trials else None)
    own_scores = [t["score"] for t in trials if t.get("switches") == chosen]
    other_scores = [t["score"] for t in trials if t.get("switches") != chosen]
    if own_scores and other_scores:
        own, others = max(own_scores), max(other_scores)
        why = (
            "they won"
            if own > others
            else "a tie keeps the program as it is; more validation questions (--n-val) or a "
            "stronger model may choose otherwise"
        )
        return (
            f"the compile kept the program's own switches and added no demo: on "
            f"{search.get('n_val')} validation questions they scored {100 * own:.1f}%, the best "
            f"other choice {100 * others:.1f}% ({why})"
        )
    return (
        "the compile kept the program as it was: no demonstration added, no instruction or "
        "switch changed (a bootstrap keeps only traces that pass the metric: try more "
        "--n-train, a larger --budget or a stronger model)"
    )
