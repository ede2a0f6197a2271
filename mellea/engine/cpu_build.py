"""Builds of the C++ CPU kernels (the sources in ``cpu_ops/``, one file per operation),
one library per CPU family, and loading them.

``python -m mellea.engine.cpu_build`` compiles every family this platform has (on
x86-64: ``avx512-vnni``, ``avx2`` and ``generic``; on aarch64: ``neon-dotprod`` and
``generic``; whatever the building CPU runs) into ``mellea/engine/_cpu_ext/``; ``make
install`` runs it. Each family's build compiles every source with its own flags and links
them into one library. A build's name carries a digest of the sources, their headers, its
flags and the torch version, so a stale one is never loaded: then :func:`load` compiles
that family on first use instead (under ``TORCH_EXTENSIONS_DIR``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).with_name("cpu_ops")
# The translation units every family's build compiles and links into one library, and
# the headers they include: all part of a build's digest.
SOURCES = sorted(SOURCE_DIR.glob("*.cpp"))
HEADERS = sorted(SOURCE_DIR.glob("*.h"))
PREBUILT_DIR = Path(__file__).with_name("_cpu_ext")
CPUINFO = "/proc/cpuinfo"  # where Linux lists what the CPU has

# Fastest first (each platform builds its own, see platform_families). The flags say
# which instructions a build may use; what the CPU must report to run it is in _NEEDS
# (x86-64-v3 and -v4 as the psABI defines the levels; on aarch64 Linux's names for
# NEON, ``asimd``, and the Armv8.2 dot product, ``asimddp``).
FAMILIES = ("avx512-vnni", "avx2", "neon-dotprod", "generic")
_FLAGS = {
    "avx512-vnni": ["-march=x86-64-v4", "-mavx512vnni", "-mtune=generic"],
    "avx2": ["-march=x86-64-v3", "-mtune=generic"],
    "neon-dotprod": ["-march=armv8.2-a+dotprod"],
    "generic": [],
}
_V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_NEEDS = {
    "avx512-vnni": _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_vnni"},
    "avx2": _V3,
    "neon-dotprod": {"asimd", "asimddp"},
    "generic": set(),
}
_X86_FAMILIES = ["avx512-vnni", "avx2", "generic"]
_ARM_FAMILIES = ["neon-dotprod", "generic"]
_COMMON = ["-O3", "-fopenmp", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def _is_arm64() -> bool:
    return platform.machine().lower() in ("aarch64", "arm64")


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them in :data:`CPUINFO` (its ``flags`` line
    on x86, ``Features`` on ARM). On macOS arm64, which has no /proc/cpuinfo, the NEON
    and dot-product features every Apple Silicon chip has (M1 and later); empty
    elsewhere."""
    if sys.platform == "darwin" and _is_arm64():
        return set(_NEEDS["neon-dotprod"])
    try:
        with open(CPUINFO) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def platform_families() -> list[str]:
    """The families built on this platform, fastest first: the x86-64 ones, the aarch64
    ones, or ``generic`` alone elsewhere."""
    if _is_x86():
        return list(_X86_FAMILIES)
    if _is_arm64():
        return list(_ARM_FAMILIES)
    return ["generic"]


def cpu_runs(family: str) -> bool:
    """Whether this CPU can execute ``family``'s build."""
    return family in platform_families() and _NEEDS[family] <= cpu_flags()


def namespace(family: str) -> str:
    """The ``torch.ops`` namespace ``family``'s build registers its ops under."""
    return "mellea_cpu_" + family.replace("-", "_")


def compile_flags(family: str) -> list[str]:
    """The compiler flags of ``family``'s build (beside torch's own)."""
    return [*_COMMON, *_FLAGS[family], f"-DMELLEA_CPU_NS={namespace(family)}"]


def build_name(family: str) -> str:
    """The library's name: the family and a digest of what it was built from."""
    import torch

    texts = [f"{p.name}\n{p.read_text()}" for p in (*SOURCES, *HEADERS)]
    key = "\n".join([*texts, *compile_flags(family), torch.__version__, sys.version])
    return f"mellea_cpu_{family.replace('-', '_')}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def prebuilt(family: str) -> Path:
    """Where the ahead-of-time build of ``family`` lies (whether or not it exists)."""
    name = build_name(family)
    return PREBUILT_DIR / name / f"{name}.so"


def compile_family(family: str, build_dir: Path | None = None) -> Path:
    """Compile ``family``'s build and load it into this process; returns the library."""
    from torch.utils import cpp_extension

    name = build_name(family)
    kwargs = {}
    if build_dir is not None:
        build_dir.mkdir(parents=True, exist_ok=True)
        kwargs["build_directory"] = str(build_dir)
    cpp_extension.load(
        name=name,
        sources=[str(p) for p in SOURCES],
        extra_cflags=compile_flags(family),
        is_python_module=False,
        verbose=False,
        **kwargs,
    )
    where = build_dir or Path(cpp_extension._get_build_directory(name, verbose=False))
    return where / f"{name}.so"


def load(family: str) -> None:
    """Load ``family``'s ops into this process: the prebuilt library, else a build now."""
    import torch

    library = prebuilt(family)
    if library.exists():
        torch.ops.load_library(str(library))
        return
    log.warning(
        "no ahead-of-time build of the %s CPU kernels (run `python -m mellea.engine.cpu_build`);"
        " compiling them now",
        family,
    )
    compile_family(family)


def _build_one(family: str) -> str:
    import shutil

    current = PREBUILT_DIR / build_name(family)
    compile_family(family, current)
    prefix = f"mellea_cpu_{family.replace('-', '_')}_"
    for stale in PREBUILT_DIR.glob(prefix + "*"):  # builds of older sources
        if stale != current and len(stale.name) == len(current.name):
            shutil.rmtree(stale, ignore_errors=True)
    return family


def main() -> int:
    """Build every family of this platform ahead of time, in parallel; 1 if one failed."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    families = platform_families()
    workers = max(1, min(len(families), os.cpu_count() or 1))
    failed = 0
    with ProcessPoolExecutor(workers) as pool:
        futures = {family: pool.submit(_build_one, family) for family in families}
        for family, future in futures.items():
            try:
                future.result()
                log.info("built the %s CPU kernels: %s", family, prebuilt(family))
            except Exception as exc:
                failed += 1
                log.error("the %s CPU kernels did not build: %s", family, exc)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
