"""``sqlweave gnn``: train the graph retriever and query it from the shell.

Imports of torch and the model happen inside the commands so that registering this app in the
main CLI costs nothing until a ``gnn`` command actually runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

logger = logging.getLogger(__name__)

app = typer.Typer(help="Graph-embedding demonstration retriever (MageSQL Struct-Graph).")


@app.command()
def train(
    data_root: Annotated[
        Path | None, typer.Option(help="benchmark data root (default: resolved as usual)")
    ] = None,
    split: Annotated[str, typer.Option(help="Spider split used as the pool")] = "train",
    epochs: Annotated[int, typer.Option(help="training epochs")] = 10,
    n: Annotated[int, typer.Option(help="use only the first n examples (0 = all)")] = 0,
    out: Annotated[Path | None, typer.Option(help="model file (default: the cache path)")] = None,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    batch_size: Annotated[int, typer.Option(help="anchors per batch")] = 64,
    lr: Annotated[float, typer.Option(help="Adam learning rate")] = 1e-4,
    threads: Annotated[
        int, typer.Option(help="torch threads (0 = torch default; 1 is fastest on a busy box)")
    ] = 0,
) -> None:
    """Train the graph model contrastively on a Spider split and save weights + pool index."""
    import torch

    from sqlweave.data import load_spider
    from sqlweave.gnn.retriever import default_model_path, train_retriever
    from sqlweave.gnn.train import TrainConfig

    if split != "train":  # the pool's demos must come from train (retrieval.check_pool)
        raise typer.BadParameter(
            f"the pool is Spider train; --split {split!r} is not", param_hint="--split"
        )
    for name, value, least in (
        ("--epochs", epochs, 1),
        ("--batch-size", batch_size, 1),
        ("--n", n, 0),
    ):
        if value < least:
            raise typer.BadParameter(f"must be at least {least}, not {value}", param_hint=name)
    if threads:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    pool = load_spider(split, root=data_root)
    if n:
        pool = pool[:n]
    path = out or default_model_path()
    config = TrainConfig(epochs=epochs, seed=seed, batch_size=batch_size, lr=lr)
    _, result = train_retriever(pool, path, train_config=config)
    losses = ", ".join(f"{x:.4f}" for x in result.losses)
    typer.echo(
        f"trained on {result.num_graphs} graphs in {result.seconds:.0f}s; loss per epoch: {losses}"
    )
    typer.echo(f"saved to {path}")


@app.command()
def retrieve(
    sql: Annotated[
        str | None, typer.Argument(help="draft SQL to find similar train queries for")
    ] = None,
    question: Annotated[
        str | None, typer.Option(help="the question (excluded from results)")
    ] = None,
    draft_sql: Annotated[str | None, typer.Option(help="draft SQL (same as the argument)")] = None,
    db_id: Annotated[str | None, typer.Option(help="database of the question")] = None,
    k: Annotated[int, typer.Option(help="how many demonstrations")] = 5,
    model: Annotated[Path | None, typer.Option(help="model file (default: the cache path)")] = None,
    data_root: Annotated[Path | None, typer.Option(help="benchmark data root")] = None,
    exclude_same_db: Annotated[bool, typer.Option(help="skip the question's database")] = False,
    one_per_db: Annotated[bool, typer.Option(help="at most one demo per database")] = False,
) -> None:
    """Print the top-k train questions and SQL whose graphs are closest to a draft SQL."""
    import dspy

    from sqlweave.data import load_spider
    from sqlweave.gnn.retriever import GraphRetriever

    probe = draft_sql or sql
    if not probe:
        raise typer.BadParameter("give a SQL string or --draft-sql")
    if k < 1:
        raise typer.BadParameter(f"must be at least 1, not {k}", param_hint="--k")
    pool = load_spider("train", root=data_root)
    try:
        retriever = GraphRetriever(
            pool, model_path=model, exclude_same_db=exclude_same_db, one_per_db=one_per_db
        )
    except (FileNotFoundError, ValueError) as err:  # no model there, or no model in the file
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    example = dspy.Example(question=question, db_id=db_id, draft_sql=probe)
    demos = retriever.retrieve(example, k)
    if not demos:
        typer.echo("no demonstrations (the SQL does not parse?)", err=True)
        raise typer.Exit(1)
    for rank, demo in enumerate(demos, 1):
        typer.echo(f"{rank}. [{demo.db_id}] {demo.question}\n   {demo.gold_sql}")
