"""Ahead-of-time compile of every engine Triton kernel for sm_80 and sm_90, no GPU needed.

The compile runs in subprocesses with ``TRITON_INTERPRET`` removed from the environment
(``tests/kernels`` sets it for the whole pytest process), one per target, in parallel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.slow  # two full Triton compiles: minutes on a small machine

HERE = Path(__file__).parent
REPO = HERE.parents[1]
# Shared memory per block: 100 KB keeps sm_80 kernels launchable on sm_86/89 parts too.
SHARED_LIMIT = {80: 100 * 1024, 90: 228 * 1024}
ARCHS = (80, 90)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    procs = {
        arch: subprocess.Popen(
            [sys.executable, str(HERE / "aot_compile.py"), str(arch)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for arch in ARCHS
    }
    results = {}
    for arch, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"sm_{arch} compile failed:\n{err[-4000:]}"
        results[arch] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return results


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles_to_cubin(compiled: dict[int, list[dict]], arch: int) -> None:
    records = compiled[arch]
    names = {r["name"].split("[")[0] for r in records}
    assert names >= {"rms_norm", "rotary", "silu_and_mul", "store_kv", "decode_d64", "prefill_d64"}
    for r in records:
        assert {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(r["stages"]), r
        assert r["ptx_target"], r
        assert r["cubin_bytes"] > 0, r


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_memory_fits(compiled: dict[int, list[dict]], arch: int) -> None:
    for r in compiled[arch]:
        assert r["shared"] <= SHARED_LIMIT[arch], r


@pytest.mark.parametrize("arch", ARCHS)
def test_half_precision_kernels_do_not_spill(compiled: dict[int, list[dict]], arch: int) -> None:
    for r in compiled[arch]:
        if not r["name"].endswith("[fp32]"):
            assert r["spill_stores"] == 0, r
