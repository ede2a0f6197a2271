// The AVX2 build's tiles on AVX512-VL VNNI (the EVEX form; what the tests run where
// AVX-VNNI is missing): tiles_vnni256.h's body with this instruction.
#define MELLEA_VNNI256 evex_vnni
#define MELLEA_DPBUSD _mm256_dpbusd_epi32
#define MELLEA_TARGET MELLEA_EVEX_VNNI
#include "tiles_vnni256.h"
