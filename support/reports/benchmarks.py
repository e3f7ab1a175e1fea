"""The benchmarks of runs side by side: pytest-benchmark's JSON files, kept with a run, as one
row per run, workload and device, with the speed-up over the CPU in the same run and the
ratio to the first run that measured the same workload on the same device (a version's
effect). The files are read with their run (support/reports/runs.py)."""
from __future__ import annotations

from support.reports.runs import Run


def _bench_device(b: dict) -> str:
    ei = b.get("extra_info") or {}
    params = b.get("params") or {}
    return str(ei.get("device") or params.get("device") or "cpu")


def _workload(b: dict, device: str) -> str:
    """The benchmark's name without its device parameter: the same workload on any device."""
    name = b.get("name") or b.get("fullname") or "?"
    if "[" in name and name.endswith("]"):
        base, ids = name[:-1].split("[", 1)
        parts = [x for x in ids.split("-") if x != device]
        return f"{base}[{'-'.join(parts)}]" if parts else base
    return name


def _cpu_twin(device: str) -> str:
    """The CPU device a device is compared with: 'cpu' for torch's, 'jax:cpu' for 'jax:cuda'."""
    return device.rsplit(":", 1)[0] + ":cpu" if ":" in device else "cpu"


def benchmark_rows(runs: list[Run]) -> list[dict]:
    """One row per (run, workload, device): the median, the ratios the benchmark recorded in
    extra_info, the speed-up over the CPU in the same run, and the ratio to the first run
    that measured the same workload on the same device (a version's effect)."""
    rows = []
    for r in runs:
        for f in r.benchmarks:
            for b in f.get("benchmarks", []):
                med = (b.get("stats") or {}).get("median")
                if med is None:
                    continue
                dev = _bench_device(b)
                ei = b.get("extra_info") or {}
                rows.append({"run": r.name, "label": r.label, "group": b.get("group") or "",
                             "claim": ei.get("claim", ""), "workload": _workload(b, dev),
                             "device": dev, "median_s": med,
                             "recorded_ratios": {k: v for k, v in ei.items()
                                                 if k.startswith("ratio") and isinstance(v, (int, float))}})
    by_key = {(g["run"], g["workload"], g["device"]): g for g in rows}
    first: dict[tuple, float] = {}
    for g in rows:
        twin = by_key.get((g["run"], g["workload"], _cpu_twin(g["device"])))
        g["speedup_vs_cpu"] = (twin["median_s"] / g["median_s"]
                               if twin and twin is not g and g["median_s"] else None)
        key = (g["workload"], g["device"])
        if key not in first:
            first[key] = g["median_s"]
            g["vs_first_run"] = None
        else:
            g["vs_first_run"] = g["median_s"] / first[key] if first[key] else None
    rows.sort(key=lambda g: (g["claim"], g["workload"], g["device"], g["run"]))
    return rows
