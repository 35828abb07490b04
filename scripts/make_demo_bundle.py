"""Build the small Spider bundle shipped inside the package (sqlweave/demo/spider).

A user install has no ../shared/data, yet `sqlweave demo` must run: the bundle keeps Spider's own
layout (dev.json, train_spider.json, tables.json, database/<db>/<db>.sqlite) with every bundled dev
question and database, the train questions of the smallest train databases (the demo pool), and
the train questions of the ``spider-train-val`` databases, so a compile on a fresh install
validates on the same unseen databases as one on the full data. Every question keeps its id in the
full set (``question_id``), so the committed slices resolve in the bundle. Deterministic: running
it again gives the same files. Spider is CC BY-SA 4.0; PROVENANCE.md goes along.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path

from sqlweave.data import demo_pool_exclusions

FIELDS = ("db_id", "question", "query")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spider",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "sqlweave" / "demo" / "spider",
    )
    parser.add_argument(
        "--train-dbs", type=int, default=12, help="smallest train databases to keep"
    )
    args = parser.parse_args()

    src, out = args.source, args.out
    dev = json.loads((src / "dev.json").read_text())
    train = json.loads((src / "train_spider.json").read_text())
    tables = json.loads((src / "tables.json").read_text())

    dev_dbs = sorted({q["db_id"] for q in dev})
    counts = Counter(q["db_id"] for q in train)
    sizes = {db: (src / "database" / db / f"{db}.sqlite").stat().st_size for db in counts}
    # Small databases with enough questions to bootstrap from.
    candidates = sorted((db for db in counts if counts[db] >= 20), key=lambda db: (sizes[db], db))
    train_dbs = sorted(candidates[: args.train_dbs])
    # The databases every default demo pool holds out, read from the committed slice file.
    val_dbs = sorted(demo_pool_exclusions())
    if not val_dbs:
        raise SystemExit("sqlweave/slices/spider-train-val.json names no databases")

    if out.exists():
        shutil.rmtree(out)
    (out / "database").mkdir(parents=True)
    for db in dev_dbs + train_dbs + val_dbs:
        (out / "database" / db).mkdir()
        shutil.copy2(src / "database" / db / f"{db}.sqlite", out / "database" / db / f"{db}.sqlite")
    keep = set(dev_dbs) | set(train_dbs) | set(val_dbs)

    def kept(questions: list[dict], split: str, dbs: set[str]) -> list[dict]:
        # The full set's id (spider_<split>_<index>), which load_spider reads back.
        return [
            {**{k: q[k] for k in FIELDS}, "question_id": f"spider_{split}_{i:04d}"}
            for i, q in enumerate(questions)
            if q["db_id"] in dbs
        ]

    (out / "dev.json").write_text(json.dumps(kept(dev, "dev", set(dev_dbs)), indent=1))
    # The demo pool's questions first, in their old order; the validation databases' after them.
    bundled_train = kept(train, "train", set(train_dbs)) + kept(train, "train", set(val_dbs))
    (out / "train_spider.json").write_text(json.dumps(bundled_train, indent=1))
    (out / "tables.json").write_text(
        json.dumps([t for t in tables if t["db_id"] in keep], indent=1)
    )
    (out / "PROVENANCE.md").write_text(
        "# Bundled Spider demo data\n\n"
        "A subset of Spider 1.0 (Yu et al., 2018), licence CC BY-SA 4.0, as rebuilt in the project's\n"
        "shared data (SQLite files rebuilt from SpiderMan, CC BY-SA 4.0). Built by\n"
        "`scripts/make_demo_bundle.py`: all bundled dev questions and their databases, and the train\n"
        f"questions of the {len(train_dbs)} smallest train databases with at least 20 questions:\n"
        + "".join(f"- {db}\n" for db in train_dbs)
        + "\nand those of the `spider-train-val` databases (validation on databases no demo pool"
        " holds):\n"
        + "".join(f"- {db}\n" for db in val_dbs)
        + "\nEvery question keeps its id in the full set (`question_id`).\n"
    )
    print(
        f"dev: {len(dev)} questions on {len(dev_dbs)} dbs; train: {len(bundled_train)} questions"
        f" on {len(train_dbs) + len(val_dbs)} dbs"
    )


if __name__ == "__main__":
    main()
