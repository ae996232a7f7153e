/* Runs an ONNX model with onnxruntime's AArch64 build (libonnxruntime.so from the registry's aarch64
 * wheel) under qemu-aarch64, through onnxruntime's C API (this host has no AArch64 C++ compiler), so
 * that its inference can be costed as qsynth's is (tvm_integration/bench/ort_aarch64.py builds and runs it).
 *
 *   ort_driver [--measure] MODEL THREADS OUT_NAME ... -- OUT_PREFIX IN_NAME=IN.npy ... [-- OUT_PREFIX IN_NAME=IN.npy ...] ...
 *
 * makes a session on the CPU provider (intra-op THREADS, the default graph optimizations) and, for each run
 * (an OUT_PREFIX and its inputs, runs apart by "--": several inputs cost one qemu start), runs it once,
 * writes the outputs to OUT_PREFIX0.npy, OUT_PREFIX1.npy, ... and prints "N outputs". --measure (one run
 * only): that run is a warm-up (the arena, prepacked weights), the outputs are those of one more run between
 * two marks (measure.h: one inference costed by bench/qemu_blocks.py), and the code's mappings go to
 * OUT_PREFIXmaps.txt.
 * Exit status: 0, 1 when onnxruntime returned an error (printed), 2 on bad usage or files.
 *
 * onnxruntime's header is not in its wheel: the OrtApi table is reached by slot. Its order is fixed
 * (functions are only ever appended, onnxruntime_c_api.h since version 1); the slots used here: */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "npy.h"

enum Slot {
  GetErrorMessage = 2, CreateEnv = 3, CreateSession = 7, Run = 9, CreateSessionOptions = 10,
  SetIntraOpNumThreads = 24, CreateTensorWithDataAsOrtValue = 49, GetTensorMutableData = 51,
  GetTensorElementType = 60, GetDimensionsCount = 61, GetDimensions = 62, GetTensorTypeAndShape = 65,
  CreateCpuMemoryInfo = 69, ReleaseValue = 96, ReleaseTensorTypeAndShapeInfo = 99,
};
#define API_VERSION 1                  /* the oldest table holding every slot above */
#define MAX_TENSORS 64

typedef void *Status;                  /* NULL: success */
typedef struct { const void *(*GetApi)(uint32_t version); const char *(*GetVersionString)(void); } ApiBase;
const ApiBase *OrtGetApiBase(void);

static void *const *api;

static void check(Status status, const char *what) {
  if (!status) return;
  const char *(*message)(Status) = (const char *(*)(Status))api[GetErrorMessage];
  fprintf(stderr, "%s failed: %s\n", what, message(status));
  exit(1);
}
#define CALL(slot, type, ...) check(((Status(*) type)api[slot])(__VA_ARGS__), #slot)

/* ONNX element types (TensorProto.DataType) <-> .npy kind and bytes */
static const struct { int onnx; char kind; int bytes; } TYPES[] = {
  {1, 'f', 4}, {2, 'u', 1}, {3, 'i', 1}, {4, 'u', 2}, {5, 'i', 2}, {6, 'i', 4}, {7, 'i', 8}, {9, 'b', 1},
  {11, 'f', 8}, {12, 'u', 4}, {13, 'u', 8},
};

static int onnx_type(Npy a, const char *path) {
  for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; ++i)
    if (TYPES[i].kind == a.kind && TYPES[i].bytes == a.bytes) return TYPES[i].onnx;
  fprintf(stderr, "%s: no ONNX type for %c%d\n", path, a.kind, a.bytes);
  exit(2);
}

static void write_output(const char *path, void *value) {
  void *info, *data;
  int type;
  size_t ndim;
  int64_t dims[NPY_MAX_DIMS];
  CALL(GetTensorTypeAndShape, (void *, void **), value, &info);
  CALL(GetTensorElementType, (void *, int *), info, &type);
  CALL(GetDimensionsCount, (void *, size_t *), info, &ndim);
  if (ndim > NPY_MAX_DIMS) { fprintf(stderr, "%s: %zu dimensions\n", path, ndim); exit(2); }
  CALL(GetDimensions, (void *, int64_t *, size_t), info, dims, ndim);
  CALL(GetTensorMutableData, (void *, void **), value, &data);
  ((void (*)(void *))api[ReleaseTensorTypeAndShapeInfo])(info);
  for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; ++i)
    if (TYPES[i].onnx == type) {
      npy_write(path, TYPES[i].kind, TYPES[i].bytes, dims, (int)ndim, data);
      return;
    }
  fprintf(stderr, "%s: cannot write ONNX type %d\n", path, type);
  exit(2);
}

static void run(void *session, const char **in_names, void **inputs, int n_in, const char **out_names,
                void **outputs, int n_out) {
  CALL(Run, (void *, void *, const char **, void **, size_t, const char **, size_t, void **), session, NULL, in_names,
       inputs, (size_t)n_in, out_names, (size_t)n_out, outputs);
}

static void release(void **values, int n) {
  for (int k = 0; k < n; ++k) {
    ((void (*)(void *))api[ReleaseValue])(values[k]);
    values[k] = NULL;
  }
}

int main(int argc, char **argv) {
  const char *in_names[MAX_TENSORS], *out_names[MAX_TENSORS];
  void *inputs[MAX_TENSORS], *data[MAX_TENSORS], *outputs[MAX_TENSORS] = {0};
  int n_out = 0, at = 3;
  int measure = argc > 1 && !strcmp(argv[1], "--measure");
  argv += measure, argc -= measure;
  for (; at < argc && strcmp(argv[at], "--") && n_out < MAX_TENSORS; ++at) out_names[n_out++] = argv[at];
  if (argc < 3 || !n_out || at + 1 >= argc) {
    fprintf(stderr, "usage: %s [--measure] MODEL THREADS OUT_NAME ... -- OUT_PREFIX IN_NAME=IN.npy ... "
            "[-- OUT_PREFIX IN_NAME=IN.npy ...] ...\n", argv[0]);
    return 2;
  }
  for (int i = at + 1; measure && i < argc; ++i)
    if (!strcmp(argv[i], "--")) { fprintf(stderr, "--measure measures one run\n"); return 2; }
  api = OrtGetApiBase()->GetApi(API_VERSION);
  if (!api) { fprintf(stderr, "onnxruntime %s has no API version %d\n", OrtGetApiBase()->GetVersionString(), API_VERSION); return 1; }
  void *env, *options, *session, *memory;
  CALL(CreateEnv, (int, const char *, void **), 3, "qsynth", &env);          /* log errors only */
  CALL(CreateSessionOptions, (void **), &options);
  CALL(SetIntraOpNumThreads, (void *, int), options, atoi(argv[2]));
  CALL(CreateSession, (void *, const char *, void *, void **), env, argv[1], options, &session);
  CALL(CreateCpuMemoryInfo, (int, int, void **), 0, 0, &memory);              /* device allocator, default memory */
  for (++at; at < argc; at += 2) {                  /* a run: OUT_PREFIX, then its inputs up to "--" */
    const char *prefix = argv[at];
    int n_in = 0;
    for (; at + 1 < argc && strcmp(argv[at + 1], "--") && n_in < MAX_TENSORS; ++n_in) {
      char *eq = strchr(argv[++at], '=');
      if (!eq) { fprintf(stderr, "%s: not NAME=PATH.npy\n", argv[at]); return 2; }
      *eq = '\0';
      in_names[n_in] = argv[at];
      Npy a = npy_read(eq + 1);
      data[n_in] = a.data;
      CALL(CreateTensorWithDataAsOrtValue, (void *, void *, size_t, const int64_t *, size_t, int, void **), memory,
           a.data, a.elements * (size_t)a.bytes, a.shape, (size_t)a.ndim, onnx_type(a, eq + 1), &inputs[n_in]);
    }
    run(session, in_names, inputs, n_in, out_names, outputs, n_out);
    char path[4096];
    if (measure) {
      release(outputs, n_out);
      mark();
      run(session, in_names, inputs, n_in, out_names, outputs, n_out);
      mark();
      snprintf(path, sizeof path, "%smaps.txt", prefix);
      write_code_maps(path);
    }
    for (int k = 0; k < n_out; ++k) {
      snprintf(path, sizeof path, "%s%d.npy", prefix, k);
      write_output(path, outputs[k]);
    }
    printf("%d outputs\n", n_out);
    release(outputs, n_out);
    release(inputs, n_in);
    for (int k = 0; k < n_in; ++k) free(data[k]);
  }
  return 0;
}
