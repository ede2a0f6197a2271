// The AVX2 build's tiles on AVX-VNNI (the VEX form; the AVX2 build's default where the
// CPU has it): tiles_vnni256.h's body with this instruction.
#define MELLEA_VNNI256 avx_vnni
#define MELLEA_DPBUSD _mm256_dpbusd_avx_epi32
#define MELLEA_TARGET MELLEA_AVX_VNNI
#include "tiles_vnni256.h"
