"""Lecture, "The anatomy of a training loop": the PyTorch and JAX loops side by side.

"Both loops train the same 8-64-64-1 network with the same initialization scheme on the
same fold. Over five seeds the PyTorch loop scores 5.70 +- 0.29 MPa and the JAX loop
5.66 +- 0.24, the same model to within the seed-to-seed spread."

Protocol §8.2: fold 0, 120 epochs, seeds 0-4; PyTorch is ``train(seed=s)`` (here the
batched equivalent), JAX is ``support.lab.train_jax.train_jax`` (uniform +-1/sqrt(fan_in),
optax.adam(1e-3), x64 on with float32 arrays); mean +- std (ddof 0) of the five final
RMSEs. JAX's random streams depend on its version and flags, so the verdict is the
comparison, not the digits.
"""
from __future__ import annotations

import numpy as np
import pytest

from support.harness.controls import control
from support.lab import experiments

# one xdist worker (--dist loadgroup) shares the batched results of support.lab.experiments
pytestmark = pytest.mark.xdist_group("concrete-experiments")


@pytest.mark.claim("LOOP-13")
def test_pytorch_and_jax_loops_agree_within_the_seed_spread(concrete, claim, fresh):
    runs = experiments.adam_runs(concrete, fresh=fresh)
    torch_r = np.array([runs[f"seed{s}"].rmse for s in range(5)])
    jax_r = np.array(experiments.jax_runs(concrete, fresh=fresh))
    claim.record("PyTorch per seed", np.round(torch_r, 3).tolist(), unit="MPa")
    claim.record("JAX per seed", np.round(jax_r, 3).tolist(), unit="MPa")
    tm = claim.check('PyTorch mean', float(torch_r.mean()), unit='MPa')
    ts = claim.check('PyTorch std', float(torch_r.std()), unit='MPa')
    jm = claim.check('JAX mean', float(jax_r.mean()), unit='MPa')
    js = claim.check('JAX std', float(jax_r.std()), unit='MPa')
    fixed = runs["fixed"].rmse
    # the same model: the means differ by less than one seed-std ...
    assert abs(tm - jm) < max(ts, js)
    # ... and both are the working network of the stories
    assert abs(tm - fixed) < 1 and abs(jm - fixed) < 1
    # the comparison is not empty: seeds do spread
    assert ts > 0 and js > 0


@control("LOOP-13", scope="process",
         what="optax.adam steps with a tenth of the learning rate it is given: after 120 "
              "epochs the JAX loop's network is far from PyTorch's")
def optax_adam_takes_a_tenth_of_its_learning_rate(mp):
    # process scope: the JAX runs are part of the shared experiments
    import optax

    real = optax.adam

    def adam(learning_rate, *args, **kwargs):
        return real(learning_rate / 10, *args, **kwargs)
    mp.setattr(optax, "adam", adam)
# its other control: batched_adam_loses_its_first_moment (claims/lecture/
# test_tree_on_a_leaky_split.py, beside SPLIT-01's test: the same shared networks)
