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

Each claim is also checked on a realistic model: SAVE-01 and SAVE-02 on every batch norm of
support.lab.nested's model (two to five levels down, inside an nn.ModuleList and an
nn.ModuleDict) and on the buffer of its own that one of its stages holds at depth; SAVE-04 on a
nested model pickled from the temporary package (blocks in a ModuleList, a head in a
ModuleDict, a buffer of the top module), variant ``model=nested`` beside ``model=notes``.
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

from support.rules.controls import control
from support.lab.nested import D_IN, depth, modules_of, nested_model


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


NESTED_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.linear = nn.Linear(d_in, d_out)
            self.norm = nn.BatchNorm1d(d_out)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(torch.relu(self.norm(self.linear(x))))


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.ModuleList([Block(3, 4), Block(4, 4)])
            self.heads = nn.ModuleDict({"main": nn.Linear(4, 1)})
            self.register_buffer("scale", torch.tensor(2.0))

        def forward(self, x):
            for block in self.body:
                x = block(x)
            return self.heads["main"](x) * self.scale
''')

# the notes' two-layer model and a nested one: (module source, the model's class, every class
# of the suite's own that its pickle must name)
SOURCES = {"notes": (MODULE_SOURCE, "TinyNet", ("TinyNet",)),
           "nested": (NESTED_SOURCE, "Net", ("Net", "Block"))}


PACKAGE = "savetest_pkg"


@pytest.fixture(params=list(SOURCES), ids=[f"model={m}" for m in SOURCES])
def temp_package(request, tmp_path, monkeypatch):
    """A real package on sys.path defining the model's classes in savetest_pkg/models.py."""
    source, top, classes = SOURCES[request.param]
    pkg = tmp_path / "src" / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))

    def forget():
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()

    forget()
    yield pkg, forget, top, classes
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


@pytest.mark.claim("SAVE-01")
def test_gamma_and_beta_of_every_batch_norm_at_any_depth_are_the_models_parameters(claim):
    model = nested_model()
    params = dict(model.named_parameters())
    norms = modules_of(model, nn.BatchNorm1d)
    own = {name: [n for n, _ in m.named_parameters()] for name, m in norms.items()}
    missing = [f"{name}.{n}" for name, m in norms.items() for n in ("weight", "bias")
               if params.get(f"{name}.{n}") is not getattr(m, n, None)]
    claim.record("parameters_of_each_batch_norm", own)
    claim.record("batch_norm_depths", {n: depth(n) for n in norms})
    claim.record("missing_from_model_parameters", missing)
    assert all(names == ["weight", "bias"] for names in own.values())
    assert not missing, f"model.parameters() leaves out {missing}"
    # so an optimizer built from model.parameters() trains every gamma and beta
    trained = {id(p) for g in torch.optim.SGD(model.parameters(), lr=0.1).param_groups
               for p in g["params"]}
    assert all(id(m.weight) in trained and id(m.bias) in trained for m in norms.values())


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


@pytest.mark.claim("SAVE-02")
def test_buffers_at_any_depth_are_in_the_state_dict_and_not_in_parameters(claim):
    model = nested_model().train()
    model(torch.randn(16, D_IN))            # move the running statistics off their defaults
    state = model.state_dict()
    buffers = dict(model.named_buffers())
    params = dict(model.named_parameters())
    # each module's own buffers, under the name the model gives them
    own = {f"{name}.{b}" for name, m in model.named_modules() if name
           for b, _ in m.named_buffers(recurse=False)}
    norms = modules_of(model, nn.BatchNorm1d)
    claim.record("buffers", sorted(buffers))
    claim.record("buffer_depths", sorted({depth(n.rpartition(".")[0]) for n in own}))
    claim.record("missing_from_state_dict", sorted(own - set(state)))
    assert all([b for b, _ in m.named_buffers()]
               == ["running_mean", "running_var", "num_batches_tracked"] for m in norms.values())
    assert set(buffers) == own          # the batch norms' and the stage's own gain
    assert set(state) == own | set(params), f"the state_dict leaves out {sorted(own - set(state))}"
    assert all(torch.equal(state[k], buffers[k]) for k in own)   # their current values
    in_params = {id(p) for p in model.parameters()}
    assert not any(id(b) in in_params for b in buffers.values())
    assert all(not b.requires_grad for b in buffers.values())


@control("SAVE-02", what="BatchNorm registers running_mean and running_var as (frozen) "
                         "parameters, returned by parameters(), not as buffers")
def running_statistics_as_parameters(mp):
    _reregister(mp, ("running_mean", "running_var"), as_parameters=True)


@control("SAVE-02", "SAVE-05", what="state_dict() leaves out the buffers of the modules below "
                                    "the model's children")
def state_dict_drops_deep_buffers(mp):
    real = nn.Module.state_dict

    def state_dict(self, *args, **kwargs):
        state = real(self, *args, **kwargs)
        if not args and not kwargs:                # the top-level call, not a submodule's
            for name, _ in self.named_buffers():
                if depth(name.rpartition(".")[0]) >= 2:
                    state.pop(name, None)
        return state
    mp.setattr(nn.Module, "state_dict", state_dict)


@pytest.mark.claim("SAVE-04")
def test_a_pickled_whole_model_breaks_when_its_module_is_moved(claim, temp_package, tmp_path):
    pkg, forget, top, classes = temp_package
    Model = getattr(importlib.import_module(f"{PACKAGE}.models"), top)
    torch.manual_seed(0)
    model = Model().train()
    model(torch.randn(16, 3))           # running statistics off their defaults
    model.eval()
    x = torch.randn(5, 3)
    expected = model(x)
    whole, weights = tmp_path / "whole.pt", tmp_path / "weights.pt"
    torch.save(model, whole)
    torch.save(model.state_dict(), weights)

    with zipfile.ZipFile(whole) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    claim.record('pickle_names_module', f'{PACKAGE}.models'.encode() in pkl)
    assert f"{PACKAGE}.models".encode() in pkl, "the pickle does not name the class's module"
    named = {c: c.encode() in pkl for c in classes}
    claim.record("pickle_names_each_class", named)
    assert all(named.values()), "the pickle does not name every class of the model"
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
    fresh = getattr(importlib.import_module(f"{PACKAGE}.layers"), top)().eval()
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
