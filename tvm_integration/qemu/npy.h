/* NumPy .npy files (C order, little endian; version 1 and 2 headers) for the AArch64 drivers that run
 * models under qemu (model_driver.c: TVM's runtime; ort_driver.c: onnxruntime's). Errors print the
 * file's name and exit with status 2. */
#ifndef QSYNTH_NPY_H
#define QSYNTH_NPY_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_DIMS 16

typedef struct {
  char kind;                      /* 'i', 'u', 'f', 'b' */
  int bytes;                      /* per element */
  int ndim;
  int64_t shape[NPY_MAX_DIMS];
  size_t elements;
  void *data;                     /* 64-byte aligned, free() it */
} Npy;

static Npy npy_read(const char *path) {
  Npy a = {0};
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  unsigned char magic[10];
  if (fread(magic, 1, 10, f) != 10 || memcmp(magic, "\x93NUMPY", 6)) { fprintf(stderr, "%s: not .npy\n", path); exit(2); }
  size_t header_len = magic[8] | (size_t)magic[9] << 8;
  if (magic[6] >= 2) {    /* version 2: a 4-byte length */
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) exit(2);
    header_len |= (size_t)more[0] << 16 | (size_t)more[1] << 24;
  }
  char *header = calloc(header_len + 1, 1);
  if (fread(header, 1, header_len, f) != header_len) { fprintf(stderr, "%s: short header\n", path); exit(2); }
  const char *d = strstr(header, "'descr':"), *s = strstr(header, "'shape':");
  if (!d || !s || strstr(header, "'fortran_order': True")) { fprintf(stderr, "%s: unsupported header %s\n", path, header); exit(2); }
  d = strchr(d + 8, '\'') + 1;
  if ((d[0] != '<' && d[0] != '|') || !strchr("iufb", d[1])) { fprintf(stderr, "%s: unsupported dtype %s\n", path, d); exit(2); }
  a.kind = d[1];
  a.bytes = atoi(d + 2);
  a.elements = 1;
  const char *p = strchr(s, '(') + 1;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || a.ndim == NPY_MAX_DIMS) { fprintf(stderr, "%s: bad shape\n", path); exit(2); }
    a.shape[a.ndim++] = v;
    a.elements *= (size_t)v;
    p = end;
  }
  size_t nbytes = a.elements * (size_t)a.bytes;
  a.data = aligned_alloc(64, (nbytes + 64) & ~(size_t)63);
  if (fread(a.data, 1, nbytes, f) != nbytes) { fprintf(stderr, "%s: short data\n", path); exit(2); }
  fclose(f);
  free(header);
  return a;
}

/* Write ``data`` (compact, C order) as an array of ``kind`` ('i', 'u', 'f', 'b') and ``bytes`` per element. */
static void npy_write(const char *path, char kind, int bytes, const int64_t *dims, int ndim, const void *data) {
  char header[512], shape[400] = "";
  size_t elements = 1;
  for (int i = 0; i < ndim; ++i) {
    char dim[32];
    snprintf(dim, sizeof dim, "%lld,%s", (long long)dims[i], ndim > 1 && i < ndim - 1 ? " " : "");
    strncat(shape, dim, sizeof shape - strlen(shape) - 1);
    elements *= (size_t)dims[i];
  }
  if (ndim > 1) shape[strlen(shape) - 1] = '\0';        /* (2, 3) but (5,) */
  int n = snprintf(header, sizeof header, "{'descr': '%c%c%d', 'fortran_order': False, 'shape': (%s), }",
                   bytes == 1 ? '|' : '<', kind, bytes, shape);
  int total = (10 + n + 1 + 63) / 64 * 64;                  /* magic + header + '\n', 64-byte aligned */
  memset(header + n, ' ', (size_t)(total - 10 - n - 1));
  header[total - 10 - 1] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f) { perror(path); exit(2); }
  unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xff),
                             (unsigned char)((total - 10) >> 8)};
  size_t nbytes = elements * (size_t)bytes;
  if (fwrite(magic, 1, 10, f) != 10 || fwrite(header, 1, (size_t)(total - 10), f) != (size_t)(total - 10) ||
      fwrite(data, 1, nbytes, f) != nbytes) { perror(path); exit(2); }
  fclose(f);
}
#endif
