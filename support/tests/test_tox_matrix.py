"""tox.ini's matrix stays consistent with pyproject.toml.

The "oldest" env must pin exactly the lower bounds pyproject.toml declares (else it tests
versions the suite does not claim to support, or misses the floor it does claim), and every
env in env_list must be made of factors that pin something.
"""
from __future__ import annotations

import configparser
import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10 (the oldest env): pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _tox() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(ROOT / "tox.ini")
    return cp


def _factor_deps(cp) -> dict[str, dict[str, str]]:
    """factor -> {package: pinned version} from the factor-conditional deps lines."""
    out: dict[str, dict[str, str]] = {}
    for line in cp["testenv"]["deps"].splitlines():
        line = line.strip()
        # "factor: pkg==1.2" with an optional environment marker after ";"
        hit = re.match(r"^([\w,]+):\s*([A-Za-z0-9_.\-]+)==([\w.+]+)\s*(?:;.*)?$", line)
        if hit:
            out.setdefault(hit[1], {})[hit[2].lower()] = hit[3]
    return out


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
    pins = _factor_deps(_tox())["oldest"]
    floors = _floors()
    assert floors, "pyproject.toml declares no lower bounds"
    for pkg, floor in floors.items():
        assert pkg in pins, f"oldest env does not pin {pkg} (pyproject floor {floor})"
        f, p = _release(floor), _release(pins[pkg])
        # torch>=2.2 is met by 2.2.0, numpy>=1.24 by 1.24.4: same release prefix
        assert p[:len(f)] == f, f"oldest pins {pkg}=={pins[pkg]}, pyproject floor is {floor}"


def test_every_env_is_made_of_known_factors():
    cp = _tox()
    deps = _factor_deps(cp)
    envs = [e.strip() for e in cp["tox"]["env_list"].split() if e.strip()]
    assert len(envs) >= 4
    torch_seen, jax_seen = set(), set()
    for env in envs:
        factors = env.split("-")
        assert re.fullmatch(r"py3\d+", factors[0]), env
        for f in factors[1:]:
            assert f in deps, f"{env}: factor {f} pins nothing in [testenv] deps"
        torch_seen |= {deps[f].get("torch") for f in factors[1:]} - {None}
        jax_seen |= {deps[f].get("jax") for f in factors[1:]} - {None}
        # one torch and one JAX per env, whichever factor pins them
        assert sum("torch" in deps[f] for f in factors[1:]) == 1, env
        assert sum("jax" in deps[f] for f in factors[1:]) == 1, env
    assert len(torch_seen) >= 2 and len(jax_seen) >= 2
    # each JAX era pins its jaxlib to the same release as jax
    for f, pins in deps.items():
        if "jax" in pins:
            assert pins.get("jaxlib") == pins["jax"], f
