"""How much of what a question needs survives schema filtering, and what the prompt then costs.

No LM call: the filter (:mod:`sqlweave.schema_filter`) ranks the merged database's tables for each
question of a merged slice (``spider-dev-200-merged`` by default), and we count

* **table recall**: share of questions whose every gold table was kept, and share of gold tables kept;
* **column recall**: share of gold columns (resolved through aliases) whose table was kept (a kept
  table keeps every column);
* **prompt size**: tokens of the kept tables as ``direct`` renders them (native DDL), against the
  same question's own database rendered whole, as a ratio per question.

    python experiments/schema_filter_recall.py
    python experiments/schema_filter_recall.py --slice bird-52-merged --max-tables 8 --no-embeddings

Writes ``experiments/results/schema_filter/<slice>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import sqlglot
from sqlglot import exp

from sqlweave.data import load_slice
from sqlweave.db import Database
from sqlweave.schema import introspect, prompt_schema
from sqlweave.schema_filter import SchemaIndex, filter_schema, scoped
from sqlweave.values import ValueIndex

RESULTS = Path(__file__).resolve().parent / "results" / "schema_filter"


def gold_elements(sql: str, schema_tables: dict[str, list[str]]) -> tuple[set[str], set[tuple]]:
    """Gold tables and ``(table, column)`` pairs of ``sql`` (lower-cased), aliases resolved."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    tables = {t.name.lower() for t in tree.find_all(exp.Table)}
    alias = {t.alias.lower(): t.name.lower() for t in tree.find_all(exp.Table) if t.alias}
    columns = set()
    for col in tree.find_all(exp.Column):
        name = col.name.lower()
        if not name or name == "*":
            continue
        owner = col.table.lower()
        if owner:
            owner = alias.get(owner, owner)
            if owner in tables:
                columns.add((owner, name))
            continue
        for t in tables:
            if name in schema_tables.get(t, []):
                columns.add((t, name))
                break
    return tables, columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slice", default="spider-dev-200-merged")
    parser.add_argument(
        "--configs",
        default="6:0.5",
        help="comma-separated max_tables:min_share[:whole_component[:component_share]] settings "
        "(whole_component 0: off), each measured "
        "on the same index",
    )
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--no-values", action="store_true")
    parser.add_argument("--tokenizer-model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    examples = load_slice(args.slice)
    db = Database.open(examples[0].db_path)
    schema = introspect(db)
    schema_tables = {t.name.lower(): [c.name.lower() for c in t.columns] for t in schema.tables}
    start = time.perf_counter()
    encoder = None
    if not args.no_embeddings:
        from sqlweave.embeddings import default_encoder

        encoder = default_encoder()
    index = SchemaIndex(schema, encoder=encoder)
    values = None if args.no_values else ValueIndex.build(db)
    build_s = time.perf_counter() - start

    from llama_cpp import Llama

    from sqlweave.models import ensure_model

    vocab = Llama(
        model_path=str(ensure_model(args.tokenizer_model)), vocab_only=True, verbose=False
    )

    def tokens(text: str) -> int:
        return len(vocab.tokenize(text.encode("utf-8"), add_bos=False))

    originals = {str(ex.question_id): ex for ex in load_slice(args.slice.removesuffix("-merged"))}
    own_tokens: dict[str, int] = {}
    mentioned = {
        str(ex.question_id): values.mentioned(ex.question, limit=20) if values else []
        for ex in examples
    }
    whole = tokens(prompt_schema(db))
    summaries, all_rows = [], {}
    for config in args.configs.split(","):
        parts = config.split(":")
        max_tables, min_share = int(parts[0]), float(parts[1])
        whole_component = int(parts[2]) if len(parts) > 2 else 12
        component_share = float(parts[3]) if len(parts) > 3 else 0.75
        rows, per_q = [], []
        for ex in examples:
            qid = str(ex.question_id)
            t0 = time.perf_counter()
            kept = filter_schema(
                index,
                ex.question,
                ex.evidence,
                mentioned=mentioned[qid],
                max_tables=max_tables,
                min_share=min_share,
                whole_component=whole_component,
                component_share=component_share,
            )
            per_q.append(time.perf_counter() - t0)
            gold_t, gold_c = gold_elements(ex.gold_sql, schema_tables)
            kept_l = {t.lower() for t in kept.tables}
            orig = originals[qid]
            own_prefix = f"{orig.db_id.lower()}__"
            own_tables = {t for t in schema_tables if t.startswith(own_prefix)}
            if orig.db_id not in own_tokens:
                own_tokens[orig.db_id] = tokens(prompt_schema(Database.open(orig.db_path)))
            rows.append(
                {
                    "question_id": qid,
                    "kept": kept.tables,
                    "gold_tables": sorted(gold_t),
                    "tables_all_kept": gold_t <= kept_l,
                    "gold_tables_kept": len(gold_t & kept_l),
                    "gold_tables_n": len(gold_t),
                    "gold_columns_kept": sum(1 for t, _c in gold_c if t in kept_l),
                    "gold_columns_n": len(gold_c),
                    "tokens": tokens(prompt_schema(db, tables=kept.tables)),
                    # as the program sees it: the scoped view, short names where they apply
                    "view_tokens": tokens(prompt_schema(scoped(db, kept.tables, short=True))),
                    # Merged slices name tables "<db_id>__<table>": did the view hold only the
                    # question's own database, and all of it?
                    "own_db_only": all(t.startswith(own_prefix) for t in kept_l),
                    "own_db_whole": kept_l == own_tables,
                    "own_tokens": own_tokens[orig.db_id],
                }
            )
        summary = _summary(rows, per_q)
        summary.update(
            {
                "slice": args.slice,
                "max_tables": max_tables,
                "min_share": min_share,
                "whole_component": whole_component,
                "component_share": component_share,
                "embeddings": encoder is not None,
                "values": values is not None,
                "whole_schema_tokens": whole,
                "index_build_s": round(build_s, 2),
            }
        )
        print(json.dumps(summary))
        summaries.append(summary)
        all_rows[config] = rows
    out = args.out or RESULTS / f"{args.slice}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summaries": summaries, "questions": all_rows}, indent=1) + "\n")


def _summary(rows: list[dict], per_q: list[float]) -> dict:
    n = len(rows)
    return {
        "n": n,
        "own_db_only_pct": round(100 * sum(r["own_db_only"] for r in rows) / n, 1),
        "own_db_whole_pct": round(100 * sum(r["own_db_whole"] for r in rows) / n, 1),
        "questions_all_tables_kept_pct": round(
            100 * sum(r["tables_all_kept"] for r in rows) / n, 1
        ),
        "table_recall_pct": round(
            100
            * sum(r["gold_tables_kept"] for r in rows)
            / max(1, sum(r["gold_tables_n"] for r in rows)),
            1,
        ),
        "column_recall_pct": round(
            100
            * sum(r["gold_columns_kept"] for r in rows)
            / max(1, sum(r["gold_columns_n"] for r in rows)),
            1,
        ),
        "tables_kept_mean": round(statistics.mean(len(r["kept"]) for r in rows), 2),
        "tokens_mean": round(statistics.mean(r["tokens"] for r in rows), 1),
        "own_tokens_mean": round(statistics.mean(r["own_tokens"] for r in rows), 1),
        "token_ratio_mean": round(statistics.mean(r["tokens"] / r["own_tokens"] for r in rows), 2),
        "view_tokens_mean": round(statistics.mean(r["view_tokens"] for r in rows), 1),
        "view_token_ratio_mean": round(
            statistics.mean(r["view_tokens"] / r["own_tokens"] for r in rows), 2
        ),
        "filter_ms_per_question": round(1000 * statistics.mean(per_q), 1),
    }


if __name__ == "__main__":
    main()
