/* What the AArch64 drivers do so that one inference can be costed (tvm_integration/bench/qemu_blocks.py):
 * ``mark()`` runs HINT #100, a NOP on any Arm core, which the block-counting qemu plugin
 * (bench/block_counter.c) takes as a mark: it counts the blocks run between the first two marks, so a
 * driver marks just before and after the inference it measures (after a warm-up run: no first-run
 * allocation or weight packing in the count). ``write_code_maps`` writes the executable mappings of
 * /proc/self/maps (qemu-user shows the guest's), so that each block's address names its library. */
#ifndef QSYNTH_MEASURE_H
#define QSYNTH_MEASURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void mark(void) { __asm__ volatile("hint #100" ::: "memory"); }

static void write_code_maps(const char *path) {
  FILE *in = fopen("/proc/self/maps", "r"), *out = fopen(path, "w");
  if (!in || !out) { perror(path); exit(2); }
  char line[4096], perms[8];
  while (fgets(line, sizeof line, in))
    if (sscanf(line, "%*x-%*x %7s", perms) == 1 && perms[2] == 'x') fputs(line, out);
  fclose(in);
  fclose(out);
}
#endif
