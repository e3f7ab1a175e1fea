"""support.lab.batched: networks trained together give, run by run, the numbers of the one
PyTorch loop (``support.lab.train_torch.train``), bit for bit.

A one-epoch budget (13 steps) keeps this fast, and a difference in one bit shows; the divergent SGD run at lr 1.0 and the accumulating loop are
the most sensitive to a single rounding difference, so they are included.
"""
from __future__ import annotations

import math

import pytest
import torch

from support.lab.batched import Spec, epoch_order, shuffle_seeds, split, train_many
from support.lab.train_torch import mlp, train

EPOCHS = 1


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def sequential(data, s: Spec, optimizer: str):
    tr, va = split(data, s.scheme, s.fold)
    return train(data, seed=s.seed, epochs=EPOCHS, optimizer=optimizer, lr=s.lr,
                 zero_grad=s.zero_grad, scale=s.scale, scaler_on_all=s.scaler_on_all,
                 train_idx=tr, val_idx=va, record=True)


@pytest.mark.parametrize("optimizer,specs", [
    ("adam", [Spec(seed=3, fold=2), Spec(seed=1, fold=4, scheme="kfold"),
              Spec(zero_grad=False), Spec(scale=False), Spec(seed=2, fold=1, scaler_on_all=True)]),
    ("sgd", [Spec(seed=3, lr=1.0), Spec(lr=0.1), Spec(lr=1e-3, scale=False)]),
], ids=["adam", "sgd"])
def test_batched_equals_one_at_a_time_bit_for_bit(concrete, optimizer, specs):
    batched = train_many(concrete, specs, epochs=EPOCHS, optimizer=optimizer, record=True)
    for s, b in zip(specs, batched):
        ref = sequential(concrete, s, optimizer)
        assert all(same(x, y) for x, y in zip(b.history, ref.history)), s
        assert same(b.rmse, ref.rmse), s
        assert b.steps == ref.steps and b.nonfinite_epochs == ref.nonfinite_epochs


def test_a_network_does_not_depend_on_its_batch_mates(concrete):
    alone = train_many(concrete, [Spec(seed=4, fold=3)], epochs=EPOCHS)[0]
    crowd = train_many(concrete, [Spec(seed=s, fold=f) for s in range(5) for f in (1, 3)],
                       epochs=EPOCHS)
    assert alone.rmse == crowd[4 * 2 + 1].rmse


def test_shuffle_seeds_replay_the_dataloader(concrete):
    torch.manual_seed(7)
    ds = torch.utils.data.TensorDataset(torch.arange(100))
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True)
    mlp()
    seen = [torch.cat([b[0] for b in loader]) for _ in range(3)]
    torch.manual_seed(7)
    mlp()
    replay = [epoch_order(s, 100) for s in shuffle_seeds(3)]
    assert all(torch.equal(a, b) for a, b in zip(seen, replay))
