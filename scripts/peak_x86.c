/* Instruction peaks of this machine, measured by scripts/bench_kernels.py in the same run as the
 * kernels: 12 independent register-only chains of each instruction (more than latency x issue width),
 * median of 9 trials, in CPU time (the machine is shared: wall clock counts other jobs). `peak NAME...` runs the named probes only: the caller names those whose CPU
 * feature the host has (isa_specs/host.py), so the file is built without -march and the AMX code
 * carries its own target attribute. Prints one JSON object: instructions per second per probe. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *x, const void *y) { double a = *(const double *)x, b = *(const double *)y; return (a > b) - (a < b); }

#define X12(op, r) op " %%" r "17, %%" r "16, %%" r "0\n\t" op " %%" r "17, %%" r "16, %%" r "1\n\t" \
  op " %%" r "17, %%" r "16, %%" r "2\n\t" op " %%" r "17, %%" r "16, %%" r "3\n\t" \
  op " %%" r "17, %%" r "16, %%" r "4\n\t" op " %%" r "17, %%" r "16, %%" r "5\n\t" \
  op " %%" r "17, %%" r "16, %%" r "6\n\t" op " %%" r "17, %%" r "16, %%" r "7\n\t" \
  op " %%" r "17, %%" r "16, %%" r "8\n\t" op " %%" r "17, %%" r "16, %%" r "9\n\t" \
  op " %%" r "17, %%" r "16, %%" r "10\n\t" op " %%" r "17, %%" r "16, %%" r "11\n\t"
#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"
#define N 20000000L
#define AVX512 __attribute__((target("avx512f")))   /* lets the asm name zmm16-31 */
#define AMX __attribute__((target("amx-tile,amx-int8")))

static AVX512 void dpbusd_zmm(void) { for (long i = 0; i < N; i++) __asm__ volatile(X12("vpdpbusd", "zmm") ::: CLOBBER); }
static AVX512 void popcntq_zmm(void) {
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
/* AVX2 (every x86-64 host of the pool): the two multiplies of the exact int8 tiles without VNNI, 16 MACs
 * each (vpmaddwd: 8 lanes of two int16 products; vpmaddubsw: 16 lanes of two byte products) */
#define Y12(op) op " %%ymm15, %%ymm14, %%ymm0\n\t" op " %%ymm15, %%ymm14, %%ymm1\n\t" op " %%ymm15, %%ymm14, %%ymm2\n\t" \
  op " %%ymm15, %%ymm14, %%ymm3\n\t" op " %%ymm15, %%ymm14, %%ymm4\n\t" op " %%ymm15, %%ymm14, %%ymm5\n\t" \
  op " %%ymm15, %%ymm14, %%ymm6\n\t" op " %%ymm15, %%ymm14, %%ymm7\n\t" op " %%ymm15, %%ymm14, %%ymm8\n\t" \
  op " %%ymm15, %%ymm14, %%ymm9\n\t" op " %%ymm15, %%ymm14, %%ymm10\n\t" op " %%ymm15, %%ymm14, %%ymm11\n\t"
static void maddwd_ymm(void) { for (long i = 0; i < N; i++) __asm__ volatile(Y12("vpmaddwd") ::: CLOBBER); }
static void maddubsw_ymm(void) { for (long i = 0; i < N; i++) __asm__ volatile(Y12("vpmaddubsw") ::: CLOBBER); }

/* The exact w16 row of the AVX2 tiles (int16 operands, tvm_integration/kernels/int8.py): per pair of k, two B
 * loads, then per row a broadcast of A's two int16 (vpbroadcastd m32) and, per B register, vpmaddwd into a
 * product and vpaddd of it into the row's accumulator: 5 rows x 16 columns (ymm0-9). `_reg` keeps A in a
 * register (no broadcast): the two tell whether a broadcast from memory takes a vector pipe's issue slot. */
static uint8_t w16_a[5 * 64] __attribute__((aligned(64)));
static uint8_t w16_b[4 * 64] __attribute__((aligned(64)));
#define W16ROW(c0, c1, A) A "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\tvpaddd %%ymm15, %%ymm" #c0 ", %%ymm" #c0 "\n\t" \
  "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n\tvpaddd %%ymm15, %%ymm" #c1 ", %%ymm" #c1 "\n\t"
#define W16B(G) "vmovdqu 64*" #G "(%1), %%ymm12\n\tvmovdqu 64*" #G "+32(%1), %%ymm13\n\t"
#define W16G(G) W16B(G) W16ROW(0, 1, "vpbroadcastd 0+4*" #G "(%0), %%ymm14\n\t") \
  W16ROW(2, 3, "vpbroadcastd 64+4*" #G "(%0), %%ymm14\n\t") W16ROW(4, 5, "vpbroadcastd 128+4*" #G "(%0), %%ymm14\n\t") \
  W16ROW(6, 7, "vpbroadcastd 192+4*" #G "(%0), %%ymm14\n\t") W16ROW(8, 9, "vpbroadcastd 256+4*" #G "(%0), %%ymm14\n\t")
#define W16G_REG(G) W16B(G) W16ROW(0, 1, "") W16ROW(2, 3, "") W16ROW(4, 5, "") W16ROW(6, 7, "") W16ROW(8, 9, "")
#define W16CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm12", \
  "xmm13", "xmm14", "xmm15"
/* onnxruntime's (MLAS's) AVX2 u8 x s8 row, which saturates: vpmaddubsw of a 4-byte A broadcast and B into
 * int16 pair sums, vpmaddwd by ones (ymm11) into int32, vpaddd: 32 MACs per vpmaddubsw, 5 x 16 as above. */
#define U8ROW(c0, c1, A) A "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n\tvpmaddwd %%ymm11, %%ymm15, %%ymm15\n\t" \
  "vpaddd %%ymm15, %%ymm" #c0 ", %%ymm" #c0 "\n\tvpmaddubsw %%ymm13, %%ymm14, %%ymm15\n\t" \
  "vpmaddwd %%ymm11, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %%ymm" #c1 ", %%ymm" #c1 "\n\t"
#define U8G(G) W16B(G) U8ROW(0, 1, "vpbroadcastd 0+4*" #G "(%0), %%ymm14\n\t") \
  U8ROW(2, 3, "vpbroadcastd 64+4*" #G "(%0), %%ymm14\n\t") U8ROW(4, 5, "vpbroadcastd 128+4*" #G "(%0), %%ymm14\n\t") \
  U8ROW(6, 7, "vpbroadcastd 192+4*" #G "(%0), %%ymm14\n\t") U8ROW(8, 9, "vpbroadcastd 256+4*" #G "(%0), %%ymm14\n\t")
static void u8s8_5x16(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile(U8G(0) U8G(1) U8G(2) U8G(3) :: "r"(w16_a), "r"(w16_b) : W16CLOBBER, "xmm11");
}
static void w16_5x16(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile(W16G(0) W16G(1) W16G(2) W16G(3) :: "r"(w16_a), "r"(w16_b) : W16CLOBBER);
}
static void w16_5x16_reg(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile(W16G_REG(0) W16G_REG(1) W16G_REG(2) W16G_REG(3) :: "r"(w16_a), "r"(w16_b) : W16CLOBBER);
}

/* The load mix of a register-blocked vpdpbusd tile, from L1, without loop or C traffic: per 4-byte k
 * group, the B columns' zmm loads and one A broadcast per row (vpbroadcastd m32). It bounds what a
 * kernel of that shape can reach below the register-only peak. */
static uint8_t mix_a[8 * 64] __attribute__((aligned(64)));
static uint8_t mix_b[13 * 192] __attribute__((aligned(64)));   /* 8x48 reads up to 192*12 + 192 */
/* One 4-byte k group at byte offset G: 6x32 = 2 B loads, then per row a broadcast and two vpdpbusd
 * (accumulators 2r, 2r+1); 8x48 = 3 B loads, then per row a broadcast and three (3r, 3r+1, 3r+2). */
#define R32(r, c0, c1, G) "vpbroadcastd 64*" #r "+" #G "(%0), %%zmm30\n\t" \
  "vpdpbusd %%zmm24, %%zmm30, %%zmm" #c0 "\n\tvpdpbusd %%zmm25, %%zmm30, %%zmm" #c1 "\n\t"
#define G32(G) "vmovdqu32 128*" #G "(%1), %%zmm24\n\tvmovdqu32 128*" #G "+64(%1), %%zmm25\n\t" R32(0, 0, 1, G) \
  R32(1, 2, 3, G) R32(2, 4, 5, G) R32(3, 6, 7, G) R32(4, 8, 9, G) R32(5, 10, 11, G)
#define R48(r, c0, c1, c2, G) "vpbroadcastd 64*" #r "+" #G "(%0), %%zmm30\n\t" \
  "vpdpbusd %%zmm24, %%zmm30, %%zmm" #c0 "\n\tvpdpbusd %%zmm25, %%zmm30, %%zmm" #c1 "\n\t" \
  "vpdpbusd %%zmm26, %%zmm30, %%zmm" #c2 "\n\t"
#define G48(G) "vmovdqu32 192*" #G "(%1), %%zmm24\n\tvmovdqu32 192*" #G "+64(%1), %%zmm25\n\t" \
  "vmovdqu32 192*" #G "+128(%1), %%zmm26\n\t" R48(0, 0, 1, 2, G) R48(1, 3, 4, 5, G) R48(2, 6, 7, 8, G) \
  R48(3, 9, 10, 11, G) R48(4, 12, 13, 14, G) R48(5, 15, 16, 17, G) R48(6, 18, 19, 20, G) R48(7, 21, 22, 23, G)
#define ACC24 CLOBBER, "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", \
  "xmm22", "xmm23"
static AVX512 void mix_6x32(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile(G32(0) G32(4) G32(8) G32(12) :: "r"(mix_a), "r"(mix_b) : CLOBBER, "xmm24", "xmm25", "xmm30");
}
static AVX512 void mix_8x48(void) {
  for (long i = 0; i < N / 4; i++)
    __asm__ volatile(G48(0) G48(4) G48(8) G48(12) :: "r"(mix_a), "r"(mix_b) : ACC24, "xmm24", "xmm25", "xmm26", "xmm30");
}

static double per_second(void (*fn)(void), double count) {
  double t[9];
  for (int r = 0; r < 9; r++) { double t0 = now(); fn(); t[r] = now() - t0; }
  qsort(t, 9, sizeof t[0], cmp);
  return count / t[4];
}

/* 4 independent accumulator tiles (latency ~4x the issue interval). The AMX tile data state is
 * requested first (granted on Linux 5.16+, which lists the amx_* flags); the tiles are configured per trial. */
static AMX void tdpbusd(void) {
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */)) { perror("arch_prctl"); exit(3); }
  uint8_t cfg[64] __attribute__((aligned(64))) = {0};
  cfg[0] = 1;
  for (int t = 0; t < 8; t++) { cfg[16 + 2 * t] = 64; cfg[48 + t] = 16; }
  __asm__ volatile("" ::: "memory");      /* gcc drops cfg's stores otherwise: ldtilecfg reads it in asm */
  _tile_loadconfig(cfg);
  for (long i = 0; i < N / 24; i++) { _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7); }
  _tile_release();
}

static const struct { const char *name; void (*fn)(void); double count; } PROBES[] = {
  {"vpdpbusd_zmm", dpbusd_zmm, 12.0 * N}, {"vpopcntq_zmm", popcntq_zmm, 12.0 * N},
  {"vpdpbusd_ymm_vex", dpbusd_ymm_vex, 12.0 * N},
  {"vpdpbusd_zmm_mix_6x32", mix_6x32, 48.0 * (N / 4)}, {"vpdpbusd_zmm_mix_8x48", mix_8x48, 96.0 * (N / 4)},
  {"tdpbusd", tdpbusd, 4.0 * (N / 24)},
  {"vpmaddwd_ymm", maddwd_ymm, 12.0 * N}, {"vpmaddubsw_ymm", maddubsw_ymm, 12.0 * N},
  {"vpmaddwd_ymm_w16_5x16", w16_5x16, 40.0 * (N / 4)}, {"vpmaddwd_ymm_w16_5x16_reg", w16_5x16_reg, 40.0 * (N / 4)},
  {"vpmaddubsw_ymm_u8s8_5x16", u8s8_5x16, 40.0 * (N / 4)},
};
#define NPROBES (sizeof PROBES / sizeof PROBES[0])

static int probe(const char *name) {
  size_t p = 0;
  while (p < NPROBES && strcmp(PROBES[p].name, name)) p++;
  return p < NPROBES ? (int)p : -1;
}

int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++)
    if (probe(argv[a]) < 0) { fprintf(stderr, "unknown probe %s\n", argv[a]); return 2; }
  printf("{");
  for (int a = 1; a < argc; a++) {
    int p = probe(argv[a]);
    printf("%s\"%s\": %.6g", a > 1 ? ", " : "", PROBES[p].name, per_second(PROBES[p].fn, PROBES[p].count));
  }
  printf("}\n");
  return 0;
}
