"""Summary sheet, "Key ideas", "A deep learning framework gives you" (S:5).

"A deep learning framework gives you tensors on CPU or GPU, automatic differentiation,
ready-made layers, losses and optimizers, data loading, and ways to save or export models"
(FW-01). "PyTorch, TensorFlow and JAX are frameworks; Keras is a high-level API that runs on
top of them (model.compile(...), then model.fit(x, y, epochs=5))" (FW-02). "ONNX is a common
file format for trained models, so other frameworks and runtimes can run them" (FW-04). Not
testable: GPUs and TPUs "make training faster, not more accurate" (FW-03), and the sheet's
footnote markers (PED-15).

FW-01 looks each piece up as an API of the installed torch and JAX/optax (:func:`api`). Keras
and ONNX need optional packages (the `frameworks` extra: keras>=3, onnx, onnxruntime,
onnxscript); without them the claims are skipped with the install command. Keras picks its
backend from KERAS_BACKEND once, at import, so each backend runs in its own interpreter; the two
run side by side, once per test run. TensorFlow is not installed: the JAX and PyTorch backends
are the ones checked.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata

import numpy as np
import pytest
import torch

from support.rules.controls import control
from support.lab import distributed
from support.lab.train_torch import mlp
from support.machine.environment import shared_env

KERAS_INSTALL = "pip install 'keras>=3'  (or: pip install -e '.[frameworks]')"


ONNX_INSTALL = "pip install onnx onnxruntime onnxscript  (or: pip install -e '.[frameworks]')"


BACKENDS = {"jax": "jax", "torch": "torch"}


KERAS_TIMEOUT_S = 300


KERAS_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(x, y, epochs=5, verbose=0)
    torch = sys.modules.get("torch")
    print(json.dumps({"backend": keras.backend.backend(), "keras": keras.__version__,
                      "loss": [float(v) for v in history.history["loss"]],
                      "torch": getattr(torch, "__version__", None)}))
    # the interpreter's last collection walks everything keras and its backend built: about
    # a second per process at exit; frozen, the memory is left to the OS
    import gc
    gc.freeze()
''')


def _installed(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _keras_fits() -> dict[str, tuple[int, dict, str]]:
    """KERAS_SCRIPT under each backend, in fresh interpreters started side by side:
    {backend: (returncode, parsed output, tail of stderr)}. Under xdist they keep to this
    worker's share of the cores (environment.shared_env)."""
    procs = {b: subprocess.Popen([sys.executable, "-c", KERAS_SCRIPT],
                                 env=dict(os.environ, KERAS_BACKEND=b, **shared_env()),
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
             for b in BACKENDS if not _installed(BACKENDS[b])}
    runs = {}
    try:
        for backend, proc in procs.items():
            out, err = proc.communicate(timeout=KERAS_TIMEOUT_S)
            last = out.strip().splitlines()[-1] if out.strip() else "{}"
            runs[backend] = (proc.returncode, json.loads(last) if proc.returncode == 0 else {},
                             err[-2000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory):
    if _installed("keras"):
        pytest.skip(f"keras is not installed: {KERAS_INSTALL}")
    # once per test run, also when xdist sends the two backends' tests to different workers
    return distributed.once_per_run("keras", _keras_fits, tmp_path_factory.getbasetemp().parent)


# Keras fits in interpreters of its own (KERAS_BACKEND is read once, at import), which no
# patch made in this process reaches: the control reaches them through the environment, a
# sitecustomize on PYTHONPATH that every new interpreter of this session runs at start.
FIT_ONE_EPOCH = textwrap.dedent('''
    import os
    if os.environ.get("KERAS_BACKEND"):
        import keras
        _fit = keras.Model.fit

        def fit(self, *args, **kwargs):
            kwargs["epochs"] = 1
            return _fit(self, *args, **kwargs)
        keras.Model.fit = fit
''')


def api(path: str) -> bool:
    """Whether the API ``path`` ("torch.utils.data.DataLoader", "jax.export") exists in this
    installation, whatever was imported before: the longest importable module prefix is
    imported explicitly, and only the rest is looked up as attributes. (``hasattr(jax,
    "export")`` is False in JAX releases that import the submodule lazily, until something
    else imports it.)"""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_api_imports_submodules_rather_than_asking_for_attributes():
    """The lookup FW-01 relies on: a submodule counts whether or not it was imported."""
    import sys
    assert api("json.decoder.JSONDecoder") and api("xml.dom.minidom")
    assert not api("json.no_such_thing") and not api("no_such_package.x")
    assert "xml.dom.minidom" in sys.modules


@pytest.mark.claim("FW-01")
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_framework_supplies_the_pieces(claim, framework):
    if framework == "torch":
        wanted = {"tensors_on_devices": ["torch.device", "torch.cuda.is_available"],
                  "autodiff": ["torch.autograd.grad"],
                  "layers": ["torch.nn.Linear"], "losses": ["torch.nn.MSELoss"],
                  "optimizers": ["torch.optim.Adam"],
                  "data_loading": ["torch.utils.data.DataLoader"],
                  "save": ["torch.save", "torch.load"],
                  "export": ["torch.export.export", "torch.onnx.export"]}
    else:
        pytest.importorskip("optax")
        wanted = {"tensors_on_devices": ["jax.devices", "jax.device_put"],
                  "autodiff": ["jax.grad"],
                  "layers_losses": ["jax.nn.relu", "optax.l2_loss"],
                  "optimizers": ["optax.adam"],
                  # jax.export from JAX 0.4.30; jax.experimental.export before
                  "export": ["jax.export.export|jax.experimental.export.export"]}
    pieces = {k: all(any(api(alt) for alt in p.split("|")) for p in paths)
              for k, paths in wanted.items()}
    claim.record("pieces", pieces)
    claim.record("APIs looked up", {k: v for k, v in wanted.items()})
    if framework == "jax":
        claim.record("jax.export exported as", "jax.export" if api("jax.export.export")
                     else "jax.experimental.export")
    assert all(pieces.values()), [k for k, v in pieces.items() if not v]


@control("FW-01", what="neither framework ships an optimizer any more: torch.optim.Adam and "
                       "optax.adam are gone")
def no_adam_in_either_framework(mp):
    import optax
    mp.delattr(torch.optim, "Adam")
    mp.delattr(optax, "adam")


@pytest.mark.timeout(KERAS_TIMEOUT_S + 30)
@pytest.mark.claim("FW-02")
@pytest.mark.parametrize("backend", list(BACKENDS), ids=list(BACKENDS))
def test_keras_compiles_then_fits_five_epochs_on_jax_and_torch(claim, keras_runs, backend):
    if int(metadata.version("keras").split(".")[0]) < 3:
        claim.not_applicable("Keras 2 runs on TensorFlow only; backends came with Keras 3")
    if _installed(BACKENDS[backend]):
        pytest.skip(f"the {backend} backend needs {backend} installed")
    code, result, err = keras_runs[backend]
    assert code == 0, f"keras on {backend} failed:\n{err}"
    loss = result["loss"]
    claim.record('backend', result['backend'])
    claim.check('epochs_run', len(loss))
    claim.record("loss_first_last", [loss[0], loss[-1]])
    claim.record("keras_version", result["keras"])
    assert result["backend"] == backend
    assert all(np.isfinite(loss)) and loss[-1] < loss[0]
    if backend == "torch":
        # Keras must run on the suite's torch, not pull in another one
        claim.record('torch_seen_by_keras', result['torch'])
        assert result["torch"] == torch.__version__


@control("FW-02", what="Keras's model.fit ignores epochs=5 and trains a single epoch",
         scope="process")
def keras_fit_runs_one_epoch(mp):
    import atexit
    import shutil
    import tempfile
    from pathlib import Path
    site = Path(tempfile.mkdtemp(prefix="claims-control-keras-"))
    atexit.register(shutil.rmtree, site, True)
    (site / "sitecustomize.py").write_text(FIT_ONE_EPOCH)
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site),
                                                          os.environ.get("PYTHONPATH")])))


@pytest.mark.claim("FW-04")
def test_an_onnx_export_runs_in_onnxruntime_and_matches_torch(claim, tmp_path):
    missing = _installed("onnx", "onnxruntime", "onnxscript")
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: {ONNX_INSTALL}")
    import onnx
    import onnxruntime as ort

    torch.manual_seed(0)
    model = mlp().eval()
    x = torch.randn(32, 8)
    path = tmp_path / "mlp.onnx"
    torch.onnx.export(model, (x,), str(path))   # this torch's default exporter
    onnx.checker.check_model(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    diffs = []
    for seed in range(3):  # the exported graph, not a cached answer: fresh inputs
        xs = x if seed == 0 else torch.randn(32, 8, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            expected = model(xs).numpy()
        got = session.run(None, {name: xs.numpy()})[0]
        diffs.append(float(np.abs(got - expected).max()))
    claim.check('max_abs_diff_onnxruntime_vs_torch', max(diffs))
    claim.record("onnx_opset", onnx.load(str(path)).opset_import[0].version)
    claim.record("onnxruntime_version", ort.__version__)
    # control: a model that differs by 1e-3 in one bias is told apart by the same comparison
    with torch.no_grad():
        model[-1].bias.add_(1e-3)
        shifted = model(x).numpy()
    off = float(np.abs(session.run(None, {name: x.numpy()})[0] - shifted).max())
    assert claim.figure("max_abs_diff_onnxruntime_vs_torch").judge(off)[0] == "broken"


@control("FW-04", what="torch.onnx.export writes the weights rounded to half precision, so "
                       "the file no longer holds the model torch runs")
def onnx_export_rounds_weights_to_half(mp):
    import copy
    real = torch.onnx.export

    def export(model, args, f=None, *rest, **kwargs):
        rounded = copy.deepcopy(model)
        with torch.no_grad():
            for p in rounded.parameters():
                p.copy_(p.half().float())
        return real(rounded, args, f, *rest, **kwargs)
    mp.setattr(torch.onnx, "export", export)
