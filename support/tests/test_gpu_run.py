"""support.harness.gpu_run: where CUDA is absent the command refuses loudly and runs nothing, and its
steps name the files a GPU run leaves behind."""
from __future__ import annotations

import json

import pytest

from support import cli
from support.machine import devices
from support.harness import gpu_run


@pytest.mark.skipif(devices.available("cuda"), reason="this machine has CUDA: the run would start")
def test_without_cuda_nothing_runs_and_the_summary_says_why(tmp_path, capsys):
    assert cli.main(["gpu-run", "--out", str(tmp_path)]) == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False and "no CUDA device" in summary["error"]
    assert "NO CUDA DEVICE" in capsys.readouterr().err


def test_a_bench_step_without_time_left_is_skipped_not_passed(tmp_path):
    st = gpu_run._bench_step("cuda", "H200", tmp_path, tmp_path, ["pytest"], {}, 10.0,
                             tmp_path / "log")
    assert st["rc"] == 124 and "no time left" in st["skipped"]


def test_benchmark_files_are_named_by_machine_device_and_versions():
    name = gpu_run.label("NVIDIA H200")
    assert name.startswith("bench_") and "nvidia-h200" in name.lower()
    assert "_torch" in name and "_jax" in name
