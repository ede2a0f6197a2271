// The CPU families the ops are built for, and the namespace each build's code is in.
//
// Every source file here is compiled once per CPU family (cpu_build.py names the
// flags), and a family's objects are linked into one library: the AVX-512 build has
// AVX512F/BW/VL/VNNI, the AVX2 build x86-64-v3 (AVX2, FMA, F16C), the neon-dotprod
// build aarch64's NEON with the dot product (neon.h), the generic build plain C++ the
// compiler vectorizes as it can. A file written for one family (tiles_avx2.cpp, ...) is
// empty in the other builds. Each build registers its ops under a namespace of its own
// (MELLEA_CPU_NS, register.cpp) and keeps its code in the C++ namespace of that name, so
// that several builds can be loaded in one process (the tests run every family this CPU
// can execute).
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include "neon.h"
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__)
#define MELLEA_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MELLEA_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define MELLEA_NEON 1
#endif
#ifndef MELLEA_CPU_NS
#define MELLEA_CPU_NS mellea_cpu
#endif
