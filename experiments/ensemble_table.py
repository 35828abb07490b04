"""What each paper's generator adds to the pool: the per-generator table of an ``ensemble`` run.

Reads the records of a run whose predictions carried every candidate with its origin and
execution class (``ensemble`` with ``early_stop=false``, so each generator was asked on every
question) and prints, per generator: the EX of its greedy query alone, of the execution vote over
its own candidates, its oracle (some candidate of its own right), and the questions only it has
a right candidate for; then the pool's oracle and the vote replayed over subsets of generators
(:func:`sqlweave.programs.stages.replay.generator_table`).

The replay groups candidates by the class the run recorded and weighs them as the vote would
(earliest member wins a tie); it skips the empty-result tie rule and the rules corrector, so it
is a guide for choosing on validation, not a result: a choice is confirmed by running it.

    python experiments/ensemble_table.py results/protocol/ensemble__nostop__spider-dev-200__1.5b.jsonl

Several runs on the same questions (each asking some generators) give one table over all their
generators: ``ensemble_table.py RUN_A.jsonl RUN_B.jsonl``
(:func:`sqlweave.programs.stages.replay.merge_runs`). Its per-generator
rows, "only it right" and pool oracle are exact; the vote replay over subsets is left out, since
the runs' result classes cannot be compared.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sqlweave.programs.stages.replay import generator_table as table
from sqlweave.programs.stages.replay import generator_table_markdown as markdown
from sqlweave.programs.stages.replay import merge_runs

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "records", type=Path, nargs="+", help="a run's JSONL with candidates on record (or more)"
    )
    args = parser.parse_args()
    from sqlweave.evaluate import read_records

    runs = [read_records(path) for path in args.records]
    if len(runs) == 1:
        result = table(runs[0])
    else:
        result = table(merge_runs(runs), subsets=False)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stems = [path.name.removesuffix(".jsonl") for path in args.records]
    out = RESULTS / ("+".join(stems) + ".json")
    names = [path.name for path in args.records]
    out.write_text(json.dumps({"records": " ".join(names), **result}, indent=1) + "\n")
    print(markdown(result))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
