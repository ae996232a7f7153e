/* A qemu TCG plugin (host code, loaded by qemu-aarch64 -plugin) counting how often each translated
 * block runs between two marks, for tvm_integration/bench/qemu_blocks.py.
 *
 *   qemu-aarch64 -plugin block_counter.so,out=COUNTS PROGRAM ...
 *
 * Every block gets an inline counter (a 64-bit add in the translated code: cheap, so a whole model's
 * inference runs at near qemu's own speed, where -d exec,nochain logs a line per block). A block
 * holding the mark instruction, HINT #100 (a NOP on any Arm core), snapshots all counters when it runs;
 * at exit COUNTS gets the number of marks, then, for each block that ran between the first two marks,
 * one line: its address, its runs, and its instruction words, in hex. The guest runs on one thread
 * (the counters are not atomic). Only the plugin API's declarations this file uses are written out
 * below (QEMU_PLUGIN_VERSION 1, qemu 7.2; the header is not packaged). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MARK 0xd5032c9fu              /* hint #100 */

typedef struct Block {
  uint64_t vaddr, runs, at_mark[2];
  struct Block *next;
  size_t n;
  uint32_t words[];
} Block;

static Block *blocks;
static int marks;
static FILE *out;

static void on_mark(unsigned int vcpu, void *userdata) {
  (void)vcpu, (void)userdata;
  if (marks < 2)
    for (Block *b = blocks; b; b = b->next) b->at_mark[marks] = b->runs;
  ++marks;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  size_t n = qemu_plugin_tb_n_insns(tb);
  Block *b = calloc(1, sizeof *b + n * sizeof(uint32_t));
  b->vaddr = qemu_plugin_tb_vaddr(tb);
  b->n = n;
  int marked = 0;
  for (size_t i = 0; i < n; ++i) {
    memcpy(&b->words[i], qemu_plugin_insn_data(qemu_plugin_tb_get_insn(tb, i)), 4);
    marked |= b->words[i] == MARK;
  }
  b->next = blocks;
  blocks = b;
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->runs, 1);
  if (marked) qemu_plugin_register_vcpu_tb_exec_cb(tb, on_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
}

static void write_counts(qemu_plugin_id_t id, void *userdata) {
  (void)id, (void)userdata;
  fprintf(out, "marks %d\n", marks);
  for (Block *b = blocks; b && marks >= 2; b = b->next) {
    uint64_t runs = b->at_mark[1] - b->at_mark[0];
    if (!runs) continue;
    fprintf(out, "%llx %llu", (unsigned long long)b->vaddr, (unsigned long long)runs);
    for (size_t i = 0; i < b->n; ++i) fprintf(out, " %08x", b->words[i]);
    fputc('\n', out);
  }
  fclose(out);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
  (void)info;
  if (argc != 1 || strncmp(argv[0], "out=", 4) || !(out = fopen(argv[0] + 4, "w"))) {
    fprintf(stderr, "block_counter: give out=PATH, a writable file\n");
    return 1;
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, write_counts, NULL);
  return 0;
}
