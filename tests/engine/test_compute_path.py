"""The compute path: chosen once from device, dtype and switches, recorded in stats."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from mellea.engine import cpu_kernels
from mellea.engine.compute_path import ComputePath, choose_compute_path
from mellea.engine.kernels import _dispatch
from mellea.engine.switches import EngineSwitches, read_switches

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
SWITCHES = (
    "MELLEA_CPU_KERNEL",
    "MELLEA_ENGINE_REFERENCE",
    "MELLEA_DISABLE_TRITON",
    "ONEDNN_MAX_CPU_ISA",
    "MELLEA_CPU_THREADS",
    "MELLEA_CUDA_GRAPHS",
    "MELLEA_CACHE_DIR",
)


@pytest.fixture
def no_switches(monkeypatch):
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)


def test_switches_are_read_when_asked_not_at_import(no_switches, monkeypatch):
    assert read_switches() == EngineSwitches()
    monkeypatch.setenv("MELLEA_CPU_KERNEL", "0")
    monkeypatch.setenv("MELLEA_ENGINE_REFERENCE", "1")
    monkeypatch.setenv("MELLEA_DISABLE_TRITON", "1")
    monkeypatch.setenv("MELLEA_CPU_THREADS", "3")
    monkeypatch.setenv("MELLEA_CUDA_GRAPHS", "0")
    monkeypatch.setenv("MELLEA_CACHE_DIR", "/somewhere")
    assert read_switches() == EngineSwitches(
        cpu_kernel=False,
        reference=True,
        disable_triton=True,
        cpu_threads=3,
        cuda_graphs=False,
        cache_dir=Path("/somewhere"),
    )
    monkeypatch.setenv("MELLEA_CPU_THREADS", "0")  # not a count: the tuner chooses
    assert read_switches().cpu_threads is None


def test_the_switches_are_named_only_in_the_settings_module():
    """No other module of ours reads them (as a string constant, the only way to)."""
    found = []
    for path in sorted((ROOT / "mellea").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py")):
        if path == ROOT / "mellea" / "engine" / "switches.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in SWITCHES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert found == []


@pytest.mark.parametrize(
    ("kernels_load", "switches", "dtype", "expected"),
    [
        (True, EngineSwitches(), torch.float32, ComputePath.CPP),
        (False, EngineSwitches(), torch.float32, ComputePath.TORCH),
        (True, EngineSwitches(cpu_kernel=False), torch.float32, ComputePath.TORCH),
        (True, EngineSwitches(reference=True), torch.float32, ComputePath.REFERENCE),
        (True, EngineSwitches(), torch.bfloat16, ComputePath.REFERENCE),
    ],
)
def test_cpu_paths(monkeypatch, kernels_load, switches, dtype, expected):
    monkeypatch.setattr(cpu_kernels, "available", lambda: kernels_load)
    assert choose_compute_path(CPU, dtype, switches) is expected


def test_triton_is_the_path_where_the_kernels_take_it(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_available", lambda: True)
    cuda = torch.device("cuda")
    assert choose_compute_path(cuda, torch.bfloat16, EngineSwitches()) is ComputePath.TRITON
    off = EngineSwitches(disable_triton=True)
    assert choose_compute_path(cuda, torch.bfloat16, off) is ComputePath.REFERENCE
    # Where the dispatch sends CPU tensors to Triton (the kernel tests), so does the path.
    cuda_decision = _dispatch.triton_on
    monkeypatch.setattr(_dispatch, "triton_on", lambda _device, s: cuda_decision(cuda, s))
    forced = EngineSwitches(reference=True)
    assert choose_compute_path(CPU, torch.float32, forced) is ComputePath.TRITON
    monkeypatch.setattr(_dispatch, "triton_on", cuda_decision)
    monkeypatch.setattr(_dispatch, "triton_available", lambda: False)
    assert choose_compute_path(cuda, torch.bfloat16, EngineSwitches()) is ComputePath.REFERENCE


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "cpp"),
        ({"MELLEA_CPU_KERNEL": "0"}, "torch"),
        ({"MELLEA_ENGINE_REFERENCE": "1"}, "reference"),
    ],
)
def test_stats_and_config_report_the_path_the_model_runs(
    make_engine, no_switches, monkeypatch, env, expected
):
    if expected == "cpp" and not cpu_kernels.available():
        pytest.skip("no C++ kernels here")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    engine = make_engine()
    model = engine.runner.model
    assert engine.stats()["compute_path"] == expected
    assert engine.core.config.compute_path is model.path
    assert {layer.self_attn.path for layer in model.layers} == {ComputePath(expected)}


def test_a_model_does_not_change_its_family_of_paths(make_engine, no_switches, monkeypatch):
    """The CPU fast path stores q/k in another order than the kernels' path."""
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)
    model = make_engine().runner.model
    assert model.path is ComputePath.TORCH
    with pytest.raises(ValueError, match="cannot run reference"):
        model.set_path(ComputePath.REFERENCE)
    with pytest.raises(ValueError, match="cannot run fused"):
        model.set_path(ComputePath.CPP_FUSED)  # float32 layers: no fused plan
