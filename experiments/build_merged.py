"""Build the merged benchmark (schemas that do not fit the window) and print its size.

``spider-dev-200-merged`` and ``bird-52-merged`` ask the questions of ``spider-dev-200`` and
``bird-52`` (and ``spider-train-val-merged`` those of ``spider-train-val``, for tuning) against one
SQLite file holding the tables of 48 databases (:mod:`sqlweave.merge`): the 16 Spider dev
databases, BIRD's superhero, the 8 spider-train-val databases and 23 other Spider train databases
as distractors, each
table renamed ``<db_id>__<table>``. Every gold query is rewritten to the new names with sqlglot and
kept only if it returns exactly the original rows.

    python experiments/build_merged.py            # check the committed slice files against a build
    python experiments/build_merged.py --write    # (re)write sqlweave/slices/*-merged.json

Prints tables, columns and the size of the whole schema as ``direct`` renders it (characters, and
tokens when ``--tokenizer-model`` names a local model), beside one original database's.
Writes ``experiments/results/merged_schema.json``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from sqlweave.data import (
    MERGED_SLICES,
    SLICES_DIR,
    build_merged_slice,
    ensure_merged,
    load_slice,
)
from sqlweave.db import Database
from sqlweave.schema import prompt_schema

RESULTS = Path(__file__).resolve().parent / "results"


def _columns(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return sum(len(conn.execute(f'PRAGMA table_info("{t}")').fetchall()) for t in tables)
    finally:
        conn.close()


def _tokens(texts: list[str], model: str | None) -> list[int] | None:
    if not model:
        return None
    from llama_cpp import Llama

    from sqlweave.models import ensure_model

    llama = Llama(model_path=str(ensure_model(model)), vocab_only=True, verbose=False)
    return [len(llama.tokenize(t.encode("utf-8"), add_bos=False)) for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the committed slice files")
    parser.add_argument("--tokenizer-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--out", type=Path, default=RESULTS / "merged_schema.json")
    args = parser.parse_args()

    merged = ensure_merged()
    summary: dict = {"database": merged.path.name, "n_tables": merged.n_tables}
    summary["n_columns"] = _columns(merged.path)
    for name in MERGED_SLICES:
        built = build_merged_slice(name)
        path = SLICES_DIR / f"{name}.json"
        if args.write:
            path.write_text(json.dumps(built, indent=1) + "\n", encoding="utf-8")
        else:
            committed = json.loads(path.read_text(encoding="utf-8"))
            if committed != built:
                raise SystemExit(f"{path.name} differs from a fresh build (run with --write)")
        summary[name] = {"questions": len(built["question_ids"]), "dropped": built["dropped"]}
        print(f"{name}: {len(built['question_ids'])} questions, {len(built['dropped'])} dropped")

    whole = prompt_schema(Database.open(merged.path))
    originals = {ex.db_id: ex.db_path for ex in load_slice("spider-dev-200")}
    own = [prompt_schema(Database.open(p)) for p in originals.values()]
    tokens = _tokens([whole, *own], args.tokenizer_model)
    summary["schema_chars"] = len(whole)
    summary["original_schema_chars_mean"] = round(sum(map(len, own)) / len(own), 1)
    if tokens:
        summary["schema_tokens"] = tokens[0]
        summary["original_schema_tokens_mean"] = round(sum(tokens[1:]) / len(own), 1)
        summary["original_schema_tokens_max"] = max(tokens[1:])
    print(
        f"merged: {summary['n_tables']} tables, {summary['n_columns']} columns; whole schema "
        f"{summary['schema_chars']} chars"
        + (f", {summary['schema_tokens']} tokens" if tokens else "")
        + f" (an original spider-dev-200 database: {summary['original_schema_chars_mean']} chars"
        + (f", {summary['original_schema_tokens_mean']} tokens" if tokens else "")
        + " on average)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
