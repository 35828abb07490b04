"""Graph encoder + projection head trained contrastively to embed query graphs.

``GATEncoder`` (2 attention layers) turns node features into node embeddings;
``GraphContrastiveModel`` reads a graph embedding out of them (mean ⊕ sum ⊕ max), passes it
through a 2-layer MLP projection head, and scores anchors against positive and negative views
with NT-Xent (cosine similarity, temperature τ). The encoder is injected so another GNN can be
swapped in; the model's embedding for retrieval is the L2-normalised head output, which is
what the loss shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GATConv, global_add_pool, global_max_pool, global_mean_pool
from torch_geometric.utils import to_undirected

from sqlweave.gnn.graph import NUM_NODE_TYPES

logger = logging.getLogger(__name__)


@dataclass
class GNNConfig:
    """Sizes and loss settings of the graph model (saved with the weights).

    ``hidden_channels`` and ``out_channels`` are layer widths with the heads concatenated
    (``hidden_channels // heads`` per head), as in PyG's ``GAT``.
    """

    in_channels: int = NUM_NODE_TYPES + 384
    hidden_channels: int = 128
    out_channels: int = 64
    heads: int = 4
    num_layers: int = 2
    dropout: float = 0.0
    proj_hidden: int = 128
    proj_dim: int = 64
    temperature: float = 0.5
    num_positives: int = 3
    num_negatives: int = 5
    undirected: bool = True  # message passing both ways along the DAG's edges

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GNNConfig:
        """Rebuild from :func:`dataclasses.asdict` output, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for saving next to the weights."""
        return asdict(self)


class GATEncoder(nn.Module):
    """Stacked ``GATConv`` layers (ELU between) mapping node features to node embeddings."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 128,
        out_channels: int = 64,
        heads: int = 4,
        num_layers: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if hidden_channels % heads or out_channels % heads:
            raise ValueError("hidden_channels and out_channels must be divisible by heads")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.heads, self.dropout = hidden_channels, heads, dropout
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            GATConv(w_in, w_out // heads, heads=heads, dropout=dropout)
            for w_in, w_out in zip(widths[:-1], widths[1:], strict=True)
        )

    @classmethod
    def from_config(cls, config: GNNConfig) -> GATEncoder:
        """The encoder a :class:`GNNConfig` describes."""
        return cls(
            config.in_channels,
            config.hidden_channels,
            config.out_channels,
            config.heads,
            config.num_layers,
            config.dropout,
        )

    def reset_parameters(self) -> None:
        """Re-initialise every layer (fresh weights for a new seed)."""
        for conv in self.convs:
            conv.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.elu(x)
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, "
            f"{self.out_channels}, heads={self.heads}, layers={len(self.convs)})"
        )


class GraphContrastiveModel(nn.Module):
    """Encoder → mean ⊕ sum ⊕ max readout → 2-layer MLP head, trained with NT-Xent."""

    def __init__(self, encoder: nn.Module, config: GNNConfig | None = None) -> None:
        super().__init__()
        self.config = config or GNNConfig()
        self.encoder = encoder
        readout = 3 * int(getattr(encoder, "out_channels", self.config.out_channels))
        self.head = nn.Sequential(
            nn.Linear(readout, self.config.proj_hidden),
            nn.ReLU(),
            nn.Linear(self.config.proj_hidden, self.config.proj_dim),
        )

    @classmethod
    def from_config(cls, config: GNNConfig) -> GraphContrastiveModel:
        """A model with a fresh :class:`GATEncoder` of the configured sizes."""
        return cls(GATEncoder.from_config(config), config)

    def reset_parameters(self) -> None:
        """Re-initialise encoder and head."""
        if hasattr(self.encoder, "reset_parameters"):
            self.encoder.reset_parameters()
        for layer in self.head:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def readout(self, batch: Data | Batch) -> Tensor:
        """Graph-level vectors (mean ⊕ sum ⊕ max of node embeddings), before the head."""
        edge_index = batch.edge_index
        if self.config.undirected:
            edge_index = to_undirected(edge_index, num_nodes=batch.num_nodes)
        h = self.encoder(batch.x, edge_index)
        index = getattr(batch, "batch", None)
        if index is None:
            index = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
        size = int(index.max()) + 1 if index.numel() else 0
        return torch.cat(
            [
                global_mean_pool(h, index, size),
                global_add_pool(h, index, size),
                global_max_pool(h, index, size),
            ],
            dim=1,
        )

    def forward(self, batch: Data | Batch) -> Tensor:
        """Projected graph embeddings, one row per graph in ``batch``."""
        return self.head(self.readout(batch))

    def loss(self, anchor: Tensor, positives: Tensor, negatives: Tensor) -> Tensor:
        """NT-Xent: each (anchor, positive) pair against that anchor's negatives.

        Shapes ``(B, d)``, ``(B, P, d)``, ``(B, N, d)``. Per pair the loss is
        ``-log(exp(s⁺/τ) / (exp(s⁺/τ) + Σ exp(s⁻/τ)))`` with cosine ``s``; averaged over pairs.
        """
        a = F.normalize(anchor, dim=-1).unsqueeze(1)
        pos = (a * F.normalize(positives, dim=-1)).sum(-1) / self.config.temperature  # (B, P)
        neg = (a * F.normalize(negatives, dim=-1)).sum(-1) / self.config.temperature  # (B, N)
        neg = neg.unsqueeze(1).expand(-1, pos.size(1), -1)  # (B, P, N)
        logits = torch.cat([pos.unsqueeze(-1), neg], dim=-1)  # positive first
        return (torch.logsumexp(logits, dim=-1) - pos).mean()

    @torch.no_grad()
    def embed(self, graphs: Sequence[Data], batch_size: int = 256) -> Tensor:
        """Unit-norm embeddings for many graphs (eval mode, no gradients)."""
        was_training = self.training
        self.eval()
        out = []
        for i in range(0, len(graphs), batch_size):
            chunk = [model_view(g) for g in graphs[i : i + batch_size]]
            out.append(F.normalize(self(Batch.from_data_list(chunk)), dim=-1))
        self.train(was_training)
        if not out:
            return torch.zeros((0, self.config.proj_dim))
        return torch.cat(out)

    def __repr__(self) -> str:
        n_params = sum(p.numel() for p in self.parameters())
        return (
            f"{type(self).__name__}(encoder={self.encoder!r}, readout=mean+sum+max, "
            f"head={self.head[0].in_features}->{self.config.proj_hidden}->"
            f"{self.config.proj_dim}, tau={self.config.temperature}, params={n_params:,})"
        )


def model_view(data: Data) -> Data:
    """Only what the model reads (features and edges): batching strings is wasted work."""
    return Data(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes)
