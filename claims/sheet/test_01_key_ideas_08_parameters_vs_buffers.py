"""Summary sheet, "Key ideas", "Parameters vs buffers" (S:16).

"Parameters vs buffers: BatchNorm's gamma and beta are parameters; running_mean, running_var
and num_batches_tracked are buffers, stored in the state_dict but not returned by parameters().
Saving the state_dict is the recommended way; pickling the whole model stores only a reference
to the file that defines its class, so moving or refactoring that code breaks loading"
(SAVE-01, SAVE-02, SAVE-04). Not testable: "Saving the state_dict is the recommended way"
(SAVE-03) and "Call model.eval() before inference" (MODE-08).

The whole-model pickle is broken for real: a class defined in a temporary package is saved with
torch.save(model), its module file is renamed (a refactor), and torch.load fails. The pickle
holds the module's import path and the class's qualified name, not a file path; and since torch
2.6 torch.load defaults to weights_only=True, which refuses whole-model pickles even when
nothing moved. Both are recorded.
"""
from __future__ import annotations

import importlib
import pickle
import pkgutil
import shutil
import sys
import textwrap
import types
import zipfile

import pytest
import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

from support.harness.controls import control


def _reregister(mp, names, as_parameters: bool):
    """Batch norm's layers built with ``names`` moved between parameters and buffers."""
    real = _NormBase.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        for name in names:
            if as_parameters:
                self.register_parameter(name, nn.Parameter(self._buffers.pop(name),
                                                           requires_grad=False))
            else:
                self.register_buffer(name, self._parameters.pop(name).detach())
    mp.setattr(_NormBase, "__init__", init)


MODULE_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn


    class TinyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            return self.bn(self.fc(x))
''')


PACKAGE = "savetest_pkg"


@pytest.fixture
def temp_package(tmp_path, monkeypatch):
    """A real package on sys.path defining TinyNet in savetest_pkg/models.py."""
    pkg = tmp_path / "src" / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))

    def forget():
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()

    forget()
    yield pkg, forget
    forget()


def _load_error(path, **kwargs) -> str | None:
    try:
        torch.load(path, **kwargs)
    # what torch.load raises for a pickle it refuses (weights_only) or whose class moved
    except (pickle.UnpicklingError, ImportError, AttributeError, RuntimeError) as exc:
        return f"{type(exc).__module__}.{type(exc).__name__}"
    return None


@pytest.mark.claim("SAVE-01")
def test_batchnorm_gamma_and_beta_are_parameters(claim):
    bn = nn.BatchNorm1d(4)
    names = [n for n, _ in bn.named_parameters()]
    claim.check('batchnorm_parameters', names)
    # gamma (weight) starts at 1 and beta (bias) at 0, both trained by the optimizer
    assert names == ["weight", "bias"]
    assert torch.equal(bn.weight, torch.ones(4)) and torch.equal(bn.bias, torch.zeros(4))
    assert all(p.requires_grad for p in bn.parameters())


@control("SAVE-01", what="BatchNorm registers gamma and beta as buffers, not parameters: "
                         "parameters() returns nothing to train")
def batchnorm_affine_as_buffers(mp):
    _reregister(mp, ("weight", "bias"), as_parameters=False)


@pytest.mark.claim("SAVE-02")
def test_running_statistics_are_buffers_in_the_state_dict_not_in_parameters(claim):
    bn = nn.BatchNorm1d(4)
    buffers = [n for n, _ in bn.named_buffers()]
    keys = list(bn.state_dict())
    claim.check('batchnorm_buffers', buffers)
    claim.record("state_dict_keys", keys)
    in_params = {id(p) for p in bn.parameters()}
    assert buffers == ["running_mean", "running_var", "num_batches_tracked"]
    assert set(keys) == set(buffers) | {"weight", "bias"}
    assert not any(id(b) in in_params for b in bn.buffers())
    assert all(not b.requires_grad for b in bn.buffers())


@control("SAVE-02", what="BatchNorm registers running_mean and running_var as (frozen) "
                         "parameters, returned by parameters(), not as buffers")
def running_statistics_as_parameters(mp):
    _reregister(mp, ("running_mean", "running_var"), as_parameters=True)


@pytest.mark.claim("SAVE-04")
def test_a_pickled_whole_model_breaks_when_its_module_is_moved(claim, temp_package, tmp_path):
    pkg, forget = temp_package
    TinyNet = importlib.import_module(f"{PACKAGE}.models").TinyNet
    torch.manual_seed(0)
    model = TinyNet().eval()
    x = torch.randn(5, 3)
    expected = model(x)
    whole, weights = tmp_path / "whole.pt", tmp_path / "weights.pt"
    torch.save(model, whole)
    torch.save(model.state_dict(), weights)

    with zipfile.ZipFile(whole) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    claim.record('pickle_names_module', f'{PACKAGE}.models'.encode() in pkl)
    assert f"{PACKAGE}.models".encode() in pkl, "the pickle does not name the class's module"
    claim.record("pickle_names_a_file_path", str(pkg).encode() in pkl or b"models.py" in pkl,
                 note="the reference is an import path + class name, not a file")

    # torch.load's default in this version, on a whole model that has not moved
    default_error = _load_error(whole)
    claim.record("default_torch_load_of_whole_model", default_error or "loads",
                 note="torch>=2.6 defaults to weights_only=True, which refuses arbitrary classes")
    claim.note(f"torch {torch.__version__}: torch.load(whole_model) -> "
               f"{default_error or 'loads'}; weights_only=False is needed to unpickle a module")
    forget()
    unmoved = torch.load(whole, weights_only=False)
    assert torch.equal(unmoved(x), expected), "control: unmoved, the pickle loads"

    # the refactor: models.py becomes layers.py
    (pkg / "models.py").rename(pkg / "layers.py")
    shutil.rmtree(pkg / "__pycache__", ignore_errors=True)
    forget()
    moved_error = _load_error(whole, weights_only=False)
    claim.check('torch_load_after_moving', moved_error)

    # the state_dict survives the refactor: tensors only, the class comes from the new place
    state = torch.load(weights)
    fresh = importlib.import_module(f"{PACKAGE}.layers").TinyNet().eval()
    fresh.load_state_dict(state)
    claim.record('state_dict_loads_after_moving', torch.equal(fresh(x), expected))
    assert moved_error == "builtins.ModuleNotFoundError", f"after the move: {moved_error}"
    assert torch.equal(fresh(x), expected), "the state_dict did not rebuild the same network"


@control("SAVE-04", what="torch.load finds a class that moved within its package by its name, "
                         "so the whole-model pickle survives the refactor")
def torch_load_follows_moved_classes(mp):
    class Following(pickle.Unpickler):
        def find_class(self, module, name):
            try:
                return super().find_class(module, name)
            except ModuleNotFoundError:
                package = importlib.import_module(module.rpartition(".")[0])
                for sub in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
                    found = getattr(importlib.import_module(sub.name), name, None)
                    if found is not None:
                        return found
                raise
    shim = types.ModuleType("pickle")
    shim.__dict__.update(vars(pickle), Unpickler=Following)
    mp.setattr(torch.serialization, "pickle", shim)
