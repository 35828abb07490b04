"""Graph demonstration retriever (MageSQL Struct-Graph): SQL graphs, augmentations, GAT model.

Submodules import torch and torch-geometric; this package file does not, so ``sqlweave.gnn.cli``
stays cheap to import. Use the submodules directly::

    from sqlweave.gnn.graph import GraphBuilder
    from sqlweave.gnn.retriever import GraphRetriever, train_retriever
"""

from __future__ import annotations

__all__ = ["augment", "cli", "graph", "model", "retriever", "train"]
