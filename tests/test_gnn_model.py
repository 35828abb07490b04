"""Graph model: sizes, NT-Xent behaviour, save/load, and loss falling on a small real pool."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch

from sqlweave.gnn.graph import GraphBuilder
from sqlweave.gnn.model import GATEncoder, GNNConfig, GraphContrastiveModel, model_view
from sqlweave.gnn.train import TrainConfig, load_checkpoint, save_checkpoint, train_on_examples


def small_model(in_channels: int = 21, seed: int = 0) -> GraphContrastiveModel:
    torch.manual_seed(seed)
    return GraphContrastiveModel.from_config(GNNConfig(in_channels=in_channels))


def test_default_sizes_and_repr():
    model = small_model(389)
    text = repr(model)
    assert "GATEncoder(389, 128, 64, heads=4, layers=2)" in text
    assert "head=192->128->64" in text and "tau=0.5" in text
    assert len(model.encoder.convs) == 2
    assert model.encoder.convs[0].heads == 4 and model.encoder.convs[0].out_channels == 32
    cfg = GNNConfig.from_dict({**model.config.to_dict(), "unknown": 1})
    assert cfg == model.config


def test_encoder_is_injected_and_reset():
    encoder = GATEncoder(21, hidden_channels=32, out_channels=16, heads=4)
    model = GraphContrastiveModel(encoder, GNNConfig(in_channels=21, proj_dim=8))
    assert model.encoder is encoder and model.head[0].in_features == 48
    before = [p.detach().clone() for p in model.parameters()]
    model.reset_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(ValueError):
        GATEncoder(21, hidden_channels=30, heads=4)


def test_forward_shapes_and_loss_prefers_true_positives():
    from test_gnn_graph import HashEncoder

    builder = GraphBuilder(encoder=HashEncoder())
    sqls = [
        "SELECT count(*) FROM head WHERE age > 56",
        "SELECT name FROM singer ORDER BY age DESC",
        "SELECT a, b FROM t JOIN u ON t.id = u.id",
    ]
    graphs = [builder.build(s) for s in sqls]
    model = small_model(builder.feature_dim)
    emb = model(Batch.from_data_list([model_view(g) for g in graphs]))
    assert emb.shape == (3, 64)
    assert model.readout(Batch.from_data_list([model_view(graphs[0])])).shape == (1, 192)
    a = torch.randn(4, 8)
    near = a.unsqueeze(1).repeat(1, 3, 1) + 0.01 * torch.randn(4, 3, 8)
    far = -a.unsqueeze(1).repeat(1, 5, 1)
    good = model.loss(a, near, far)
    bad = model.loss(a, far[:, :3], near.repeat(1, 2, 1)[:, :5])
    assert good < 0.1 < bad
    # with all similarities equal the loss is log(1 + N)
    flat = model.loss(a, torch.zeros(4, 3, 8) + 1, torch.zeros(4, 5, 8) + 1)
    assert flat.item() == pytest.approx(torch.log(torch.tensor(6.0)).item(), abs=1e-5)
    unit = model.embed(graphs)
    assert torch.allclose(unit.norm(dim=1), torch.ones(3), atol=1e-5)


def test_training_loss_falls_and_checkpoint_round_trips(spider_root, tmp_path):
    from sqlweave.data import load_spider

    train = load_spider("train", root=spider_root.parent)
    pool = train[:30] + train[3000:3030]  # two groups of databases, 60 queries
    builder = GraphBuilder()  # the real sentence encoder
    config = TrainConfig(epochs=4, lr=1e-3, batch_size=16, seed=0, progress=False)
    model, result, graphs = train_on_examples(pool, builder, train_config=config)
    assert len(result.losses) == 4 and result.num_graphs == 60
    assert result.losses[-1] < result.losses[0] - 0.05, result.losses
    usable = [g for g in graphs if g is not None]
    path = save_checkpoint(tmp_path / "m.pt", model, note="test")
    loaded, payload = load_checkpoint(path)
    assert payload["note"] == "test" and loaded.config == model.config
    assert torch.allclose(loaded.embed(usable[:5]), model.embed(usable[:5]), atol=1e-6)
    # same seed, same run
    model2, result2, _ = train_on_examples(
        pool[:20], builder, train_config=TrainConfig(epochs=1, progress=False)
    )
    model3, result3, _ = train_on_examples(
        pool[:20], builder, train_config=TrainConfig(epochs=1, progress=False)
    )
    assert result2.losses == result3.losses


def test_load_checkpoint_rejects_foreign_files(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="not a sqlweave graph model"):
        load_checkpoint(path)
