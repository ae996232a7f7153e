/* qsynth_amx.h: the AMX run time of qsynth's kernels (emit/templates/qsynth_amx.h, pasted into every AMX
 * kernel header; emit/amx_runtime.py).
 *
 * The run-time contract of AMX code:
 *   int qsynth_amx_init(void)   once per process (any thread, thread-safe), before the first tile
 *                               instruction: requests the XTILEDATA permission,
 *                               arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18).
 *                               Returns 0 when granted, else the errno of the refused request (e.g.
 *                               EINVAL before Linux 5.16, or where the CPU lacks AMX): the caller falls
 *                               back to another kernel. The answer is kept: later calls make no system call.
 *   qs_<name>_tile_config()     in every thread that runs tile code, before its first tile kernel call
 *                               (the tile configuration is per thread, like the tile registers: Linux
 *                               6.18 copied it into a thread created after it, the psABI does not promise
 *                               that and the emulation does not do it);
 *   _tile_release()             in that thread after its last call.
 *   QSYNTH_AMX_EMULATED         1 when this translation unit runs the tile instructions in plain C, 0 natively;
 *                               defining QSYNTH_AMX_EXPECT_EMULATED (0 or 1) makes a build of the other kind fail.
 *
 * Native when the translation unit is compiled with AMX-TILE and AMX-INT8 (-mamx-tile -mamx-int8, or a
 * -march that has them); otherwise the intrinsics the emitted C uses (_tile_loadconfig, _tile_storeconfig,
 * _tile_release, _tile_loadd, _tile_stored, _tile_zero, _tile_dpbusd, _tile_dpbssd, _tile_dpbsud,
 * _tile_dpbuud) are replaced by the plain C below, written from Intel's pseudocode (SDM Vol. 2: LDTILECFG,
 * STTILECFG, TILELOADD, TILESTORED, TILEZERO, TILERELEASE, TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD), palette 1: eight tiles of at most
 * 16 rows of 64 bytes, each configured with its rows and bytes per row. What hardware refuses, the
 * emulation refuses too (one line on stderr, then a trap, SIGILL): a tile instruction before
 * qsynth_amx_init() or outside a configuration, an invalid configuration, operand shapes that do not
 * match. A restarted instruction (start_row != 0) is not emulated. The tile registers are per thread;
 * the state is one object per process (weak definitions), whichever translation units include this.
 */
#ifndef QSYNTH_AMX_H
#define QSYNTH_AMX_H
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <immintrin.h>

/* gcc and clang >= 15 say __AMX_TILE__, clang 14 only __AMXTILE__ */
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_INT8__) || defined(__AMXINT8__))
#define QSYNTH_AMX_EMULATED 0
#else
#define QSYNTH_AMX_EMULATED 1
#endif
#if defined(QSYNTH_AMX_EXPECT_EMULATED) && QSYNTH_AMX_EXPECT_EMULATED != QSYNTH_AMX_EMULATED
#error "the AMX build is not what QSYNTH_AMX_EXPECT_EMULATED asks for (native needs -mamx-tile -mamx-int8)"
#endif

#if !QSYNTH_AMX_EMULATED

/* 0: not requested yet; 1: granted; -errno: refused. */
__attribute__((weak)) int qsynth_amx_permission;

__attribute__((unused)) static inline int qsynth_amx_init(void) {
  int state = __atomic_load_n(&qsynth_amx_permission, __ATOMIC_ACQUIRE);
  if (state == 0) {     /* racing first calls both ask: the request is idempotent */
    state = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 1
            : -(errno ? errno : EINVAL);
    __atomic_store_n(&qsynth_amx_permission, state, __ATOMIC_RELEASE);
  }
  return state == 1 ? 0 : -state;
}

#else
/* The tile registers and their configuration, per thread. Bytes outside a tile's configured rows and
 * bytes per row are never read (every instruction stays within the configuration, which LDTILECFG
 * zeroes), so the zeroing of those bytes by writes (zero_upper_rows) is not modeled. */
struct qsynth_amx_tiles {
  uint8_t palette;              /* 0: released (every tile instruction but LDTILECFG faults), 1: configured */
  uint8_t rows[8];
  uint16_t colsb[8];
  uint8_t data[8][16][64];
};
#ifdef QSYNTH_AMX_STATE_EXTERN
/* For a loader without thread-local storage (TVM's JIT): the state is the one definition of a library
 * the process has loaded (tvm_integration/kernels/amx_runtime.py, load_emulation_state). */
struct qsynth_amx_tiles *qsynth_amx_state(void);
#define QSYNTH_AMX_STATE (qsynth_amx_state())
#else
__attribute__((weak)) _Thread_local struct qsynth_amx_tiles qsynth_amx_tiles;
#define QSYNTH_AMX_STATE (&qsynth_amx_tiles)
#endif
__attribute__((weak)) int qsynth_amx_emulated_permission;

__attribute__((unused)) static inline int qsynth_amx_init(void) {
  __atomic_store_n(&qsynth_amx_emulated_permission, 1, __ATOMIC_RELEASE);
  return 0;
}

__attribute__((noreturn, cold, unused)) static inline void qsynth_amx_fault(const char *insn, int tile, const char *why) {
  fprintf(stderr, "qsynth AMX emulation: %s", insn);
  if (tile >= 0) fprintf(stderr, " tmm%d", tile);
  fprintf(stderr, ": %s\n", why);
  __builtin_trap();
}

/* LDTILECFG: palette 0 releases; palette 1 takes each tile's rows (<= 16) and bytes per row (<= 64),
 * both zero for an unused tile, reserved bytes zero; every tile is zeroed. */
__attribute__((unused)) static inline void qsynth_amx_loadconfig(const void *config) {
  const uint8_t *c = (const uint8_t *)config;
  struct qsynth_amx_tiles *t = QSYNTH_AMX_STATE;
  if (!__atomic_load_n(&qsynth_amx_emulated_permission, __ATOMIC_ACQUIRE))
    qsynth_amx_fault("ldtilecfg", -1, "before qsynth_amx_init() (no XTILEDATA permission)");
  if (c[0] == 0) {
    memset(t, 0, sizeof *t);
    return;
  }
  if (c[0] != 1) qsynth_amx_fault("ldtilecfg", -1, "no palette but 0 and 1");
  if (c[1] != 0) qsynth_amx_fault("ldtilecfg", -1, "start_row != 0 (a restarted instruction) is not emulated");
  for (int i = 2; i < 64; i++)
    if (((i < 16) || (i >= 32 && i < 48) || i >= 56) && c[i])
      qsynth_amx_fault("ldtilecfg", -1, "reserved byte not zero");
  for (int i = 0; i < 8; i++) {
    int colsb = c[16 + 2 * i] | c[17 + 2 * i] << 8, rows = c[48 + i];
    if (colsb > 64 || rows > 16 || (colsb == 0) != (rows == 0))
      qsynth_amx_fault("ldtilecfg", i, "rows > 16, bytes per row > 64, or only one of them zero");
    t->rows[i] = (uint8_t)rows;
    t->colsb[i] = (uint16_t)colsb;
  }
  memset(t->data, 0, sizeof t->data);
  t->palette = 1;
}

/* STTILECFG: the configuration as loaded (palette, rows, bytes per row, start_row 0), or 64 zero bytes
 * when released. */
__attribute__((unused)) static inline void qsynth_amx_storeconfig(void *config) {
  uint8_t *c = (uint8_t *)config;
  const struct qsynth_amx_tiles *t = QSYNTH_AMX_STATE;
  memset(c, 0, 64);
  if (!t->palette) return;
  c[0] = t->palette;
  for (int i = 0; i < 8; i++) {
    c[16 + 2 * i] = (uint8_t)t->colsb[i];
    c[17 + 2 * i] = (uint8_t)(t->colsb[i] >> 8);
    c[48 + i] = t->rows[i];
  }
}

/* TILERELEASE: the init state. */
__attribute__((unused)) static inline void qsynth_amx_release(void) { memset(QSYNTH_AMX_STATE, 0, sizeof(struct qsynth_amx_tiles)); }

__attribute__((unused)) static inline struct qsynth_amx_tiles *qsynth_amx_tile(const char *insn, int tile, int dwords) {
  struct qsynth_amx_tiles *t = QSYNTH_AMX_STATE;
  if (tile < 0 || tile > 7) qsynth_amx_fault(insn, tile, "no such tile register");
  if (!t->palette || !t->rows[tile]) qsynth_amx_fault(insn, tile, "tile not configured");
  if (dwords && t->colsb[tile] % 4) qsynth_amx_fault(insn, tile, "bytes per row not a multiple of 4");
  return t;
}

/* TILELOADD: row r of the tile = the configured bytes at base + r*stride. */
__attribute__((unused)) static inline void qsynth_amx_loadd(int tile, const void *base, long stride) {
  struct qsynth_amx_tiles *t = qsynth_amx_tile("tileloadd", tile, 1);
  for (int r = 0; r < t->rows[tile]; r++)
    memcpy(t->data[tile][r], (const uint8_t *)base + (ptrdiff_t)r * stride, t->colsb[tile]);
}

/* TILESTORED: the configured bytes of row r to base + r*stride; nothing else is written. */
__attribute__((unused)) static inline void qsynth_amx_stored(int tile, void *base, long stride) {
  struct qsynth_amx_tiles *t = qsynth_amx_tile("tilestored", tile, 1);
  for (int r = 0; r < t->rows[tile]; r++)
    memcpy((uint8_t *)base + (ptrdiff_t)r * stride, t->data[tile][r], t->colsb[tile]);
}

/* TILEZERO */
__attribute__((unused)) static inline void qsynth_amx_zero(int tile) {
  struct qsynth_amx_tiles *t = qsynth_amx_tile("tilezero", tile, 0);
  memset(t->data[tile], 0, sizeof t->data[tile]);
}

/* TDPB[SU][SU]D: for m < C.rows, n < C.colsb/4: C.row[m].dword[n] += sum over k4 < A.colsb/4 and
 * i < 4 of A.row[m].byte[4*k4 + i] * B.row[k4].byte[4*n + i], bytes sign- or zero-extended to 32 bits,
 * int32 wrap-around, no saturation. Shapes must match: A.rows = C.rows, A.colsb/4 = B.rows,
 * B.colsb = C.colsb; the three tiles distinct. */
__attribute__((unused)) static inline void qsynth_amx_dp(const char *insn, int c, int a, int b, int a_signed, int b_signed) {
  struct qsynth_amx_tiles *t = qsynth_amx_tile(insn, c, 1);
  qsynth_amx_tile(insn, a, 1);
  qsynth_amx_tile(insn, b, 1);
  if (c == a || c == b || a == b) qsynth_amx_fault(insn, c, "operand tiles not distinct");
  if (t->rows[a] != t->rows[c] || t->colsb[a] / 4 != t->rows[b] || t->colsb[b] != t->colsb[c])
    qsynth_amx_fault(insn, c, "operand shapes do not match");
  for (int m = 0; m < t->rows[c]; m++)
    for (int n = 0; n < t->colsb[c] / 4; n++) {
      uint32_t acc;
      memcpy(&acc, t->data[c][m] + 4 * n, 4);
      for (int k = 0; k < t->colsb[a]; k++) {
        uint8_t x = t->data[a][m][k], y = t->data[b][k / 4][4 * n + k % 4];
        int32_t xa = a_signed ? (int8_t)x : x, yb = b_signed ? (int8_t)y : y;
        acc += (uint32_t)(xa * yb);
      }
      memcpy(t->data[c][m] + 4 * n, &acc, 4);
    }
}

#undef _tile_loadconfig
#undef _tile_storeconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbusd
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbuud
#define _tile_loadconfig(config) qsynth_amx_loadconfig(config)
#define _tile_storeconfig(config) qsynth_amx_storeconfig(config)
#define _tile_release() qsynth_amx_release()
#define _tile_loadd(tile, base, stride) qsynth_amx_loadd((tile), (base), (long)(stride))
#define _tile_stored(tile, base, stride) qsynth_amx_stored((tile), (base), (long)(stride))
#define _tile_zero(tile) qsynth_amx_zero(tile)
#define _tile_dpbusd(c, a, b) qsynth_amx_dp("tdpbusd", (c), (a), (b), 0, 1)
#define _tile_dpbssd(c, a, b) qsynth_amx_dp("tdpbssd", (c), (a), (b), 1, 1)
#define _tile_dpbsud(c, a, b) qsynth_amx_dp("tdpbsud", (c), (a), (b), 1, 0)
#define _tile_dpbuud(c, a, b) qsynth_amx_dp("tdpbuud", (c), (a), (b), 0, 0)
#endif
#endif
