/* Instruction peaks of this machine, measured by scripts/bench_kernels.py in the same run as the
 * kernels: 12 independent register-only chains of each instruction (more than latency x issue width),
 * median of 9 trials. Prints one JSON object: instructions per second. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *x, const void *y) { double a = *(const double *)x, b = *(const double *)y; return (a > b) - (a < b); }

#define X12(op, r) op " %%" r "17, %%" r "16, %%" r "0\n\t" op " %%" r "17, %%" r "16, %%" r "1\n\t" \
  op " %%" r "17, %%" r "16, %%" r "2\n\t" op " %%" r "17, %%" r "16, %%" r "3\n\t" \
  op " %%" r "17, %%" r "16, %%" r "4\n\t" op " %%" r "17, %%" r "16, %%" r "5\n\t" \
  op " %%" r "17, %%" r "16, %%" r "6\n\t" op " %%" r "17, %%" r "16, %%" r "7\n\t" \
  op " %%" r "17, %%" r "16, %%" r "8\n\t" op " %%" r "17, %%" r "16, %%" r "9\n\t" \
  op " %%" r "17, %%" r "16, %%" r "10\n\t" op " %%" r "17, %%" r "16, %%" r "11\n\t"
#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"
#define N 20000000L

static void dpbusd_zmm(void) { for (long i = 0; i < N; i++) __asm__ volatile(X12("vpdpbusd", "zmm") ::: CLOBBER); }
static void popcntq_zmm(void) {
  for (long i = 0; i < N; i++)
    __asm__ volatile("vpopcntq %%zmm16, %%zmm0\n\tvpopcntq %%zmm16, %%zmm1\n\tvpopcntq %%zmm16, %%zmm2\n\t"
                     "vpopcntq %%zmm16, %%zmm3\n\tvpopcntq %%zmm16, %%zmm4\n\tvpopcntq %%zmm16, %%zmm5\n\t"
                     "vpopcntq %%zmm16, %%zmm6\n\tvpopcntq %%zmm16, %%zmm7\n\tvpopcntq %%zmm16, %%zmm8\n\t"
                     "vpopcntq %%zmm16, %%zmm9\n\tvpopcntq %%zmm16, %%zmm10\n\tvpopcntq %%zmm16, %%zmm11\n\t" ::: CLOBBER);
}
static void dpbusd_ymm_vex(void) {
  for (long i = 0; i < N; i++)
    __asm__ volatile("%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm0\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm1\n\t"
                     "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm2\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm3\n\t"
                     "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm4\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm5\n\t"
                     "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm6\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm7\n\t"
                     "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm8\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm9\n\t"
                     "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm10\n\t%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm11\n\t" ::: CLOBBER);
}
static void tdpbusd(void) {     /* 4 independent accumulator tiles (latency ~4x the issue interval) */
  for (long i = 0; i < N / 24; i++) { _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7); }
}

/* The load mix of a register-blocked vpdpbusd tile, from L1, without loop or C traffic: per 4-byte k
 * group, the B columns' zmm loads and one A broadcast per row (vpbroadcastd m32). It bounds what a
 * kernel of that shape can reach below the register-only peak. */
static uint8_t mix_a[12 * 64] __attribute__((aligned(64)));
static uint8_t mix_b[4 * 4 * 64] __attribute__((aligned(64)));
/* 12 rows x 16 columns: 1 load + 12 broadcasts per 12 vpdpbusd */
static void mix_12x16(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile("vmovdqu32 0(%1), %%zmm16\n\t"
                     "vpbroadcastd 0(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpbroadcastd 64(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 128(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpbroadcastd 192(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 256(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpbroadcastd 320(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 384(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpbroadcastd 448(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 512(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpbroadcastd 576(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 640(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpbroadcastd 704(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 256(%1), %%zmm16\n\t"
                     "vpbroadcastd 4(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpbroadcastd 68(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 132(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpbroadcastd 196(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 260(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpbroadcastd 324(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 388(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpbroadcastd 452(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 516(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpbroadcastd 580(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 644(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpbroadcastd 708(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 512(%1), %%zmm16\n\t"
                     "vpbroadcastd 8(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpbroadcastd 72(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 136(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpbroadcastd 200(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 264(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpbroadcastd 328(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 392(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpbroadcastd 456(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 520(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpbroadcastd 584(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 648(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpbroadcastd 712(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 768(%1), %%zmm16\n\t"
                     "vpbroadcastd 12(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpbroadcastd 76(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 140(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpbroadcastd 204(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 268(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpbroadcastd 332(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 396(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpbroadcastd 460(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 524(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpbroadcastd 588(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 652(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpbroadcastd 716(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm11\n\t"
                     :: "r"(mix_a), "r"(mix_b) : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm16", "xmm20");
}
/* 6 rows x 32 columns: 2 loads + 6 broadcasts per 12 vpdpbusd */
static void mix_6x32(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile("vmovdqu32 0(%1), %%zmm16\n\t"
                     "vmovdqu32 64(%1), %%zmm17\n\t"
                     "vpbroadcastd 0(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 64(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 128(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 192(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 256(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 320(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 512(%1), %%zmm16\n\t"
                     "vmovdqu32 576(%1), %%zmm17\n\t"
                     "vpbroadcastd 4(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 68(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 132(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 196(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 260(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 324(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 1024(%1), %%zmm16\n\t"
                     "vmovdqu32 1088(%1), %%zmm17\n\t"
                     "vpbroadcastd 8(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 72(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 136(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 200(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 264(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 328(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm11\n\t"
                     "vmovdqu32 1536(%1), %%zmm16\n\t"
                     "vmovdqu32 1600(%1), %%zmm17\n\t"
                     "vpbroadcastd 12(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm0\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm1\n\t"
                     "vpbroadcastd 76(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm2\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm3\n\t"
                     "vpbroadcastd 140(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm4\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm5\n\t"
                     "vpbroadcastd 204(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm6\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm7\n\t"
                     "vpbroadcastd 268(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm8\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm9\n\t"
                     "vpbroadcastd 332(%0), %%zmm20\n\t"
                     "vpdpbusd %%zmm16, %%zmm20, %%zmm10\n\t"
                     "vpdpbusd %%zmm17, %%zmm20, %%zmm11\n\t"
                     :: "r"(mix_a), "r"(mix_b) : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm16", "xmm17", "xmm20");
}

static double per_second(void (*fn)(void), double count) {
  double t[9];
  for (int r = 0; r < 9; r++) { double t0 = now(); fn(); t[r] = now() - t0; }
  qsort(t, 9, sizeof t[0], cmp);
  return count / t[4];
}

int main(void) {
  printf("{\"vpdpbusd_zmm\": %.6g, \"vpopcntq_zmm\": %.6g, \"vpdpbusd_ymm_vex\": %.6g",
         per_second(dpbusd_zmm, 12.0 * N), per_second(popcntq_zmm, 12.0 * N), per_second(dpbusd_ymm_vex, 12.0 * N));
  printf(", \"vpdpbusd_zmm_mix_12x16\": %.6g, \"vpdpbusd_zmm_mix_6x32\": %.6g",
         per_second(mix_12x16, 48.0 * (N / 4)), per_second(mix_6x32, 48.0 * (N / 4)));
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0) {
    uint8_t cfg[64] __attribute__((aligned(64))) = {0};
    cfg[0] = 1;
    for (int t = 0; t < 8; t++) { cfg[16 + 2 * t] = 64; cfg[48 + t] = 16; }
    __asm__ volatile("" ::: "memory");      /* gcc drops cfg's stores otherwise: ldtilecfg reads it in asm */
    _tile_loadconfig(cfg);
    printf(", \"tdpbusd\": %.6g", per_second(tdpbusd, 4.0 * (N / 24)));
    _tile_release();
  }
  printf("}\n");
  return 0;
}
