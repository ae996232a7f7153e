/* Runs a TFLite model with LiteRT's AArch64 build (libLiteRt.so from the registry's ai-edge-litert aarch64
 * wheel: a C library, no Python in it) under qemu-aarch64, through LiteRT's C API (CompiledModel on the
 * CPU accelerator, what the Python Interpreter's default resolver runs: XNNPACK), so that a TFLite
 * model's Arm build can be checked against its stated reference (tvm_integration/bench/litert_aarch64.py).
 *
 *   litert_driver [--measure] MODEL OUT_PREFIX NAME=IN.npy ...
 *
 * feeds each input of the model's first signature (its name in the signature; a model without
 * signatures has one named by its tensors), resized where the model leaves a dimension open, runs it
 * once, writes output i's bytes to OUT_PREFIX<i>.npy (uint8; the caller knows its type and shape) and
 * prints "out <i> <name>". --measure: that run is a warm-up and the outputs are those of a second run,
 * which lies between two marks (measure.h), and the code mappings are written to OUT_PREFIXmaps.txt, so
 * that its blocks can be counted and costed (bench/qemu_blocks.py). Exit status: 0, 1 when LiteRT returned an error (printed), 2 on bad usage or files.
 *
 * The wheel has no headers: the declarations below follow litert/c/*.h (handles are pointers, statuses
 * ints, indices size_t). LiteRtRankedTensorType is filled by the library and passed back; the driver only
 * writes the dimensions of its LiteRtLayout: an int32 element type, a word of rank bits, then
 * int32 dimensions[8] and uint32 strides[8]. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "npy.h"

typedef int Status;                    /* kLiteRtStatusOk = 0 */
typedef void *Handle;
enum { CPU = 1, LOCK_READ = 0, LOCK_WRITE = 1, MAX_TENSORS = 64, MAX_RANK = 8 };
#define LAYOUT_BYTES (4 + 4 * MAX_RANK + 4 * MAX_RANK)
#define TYPE_BYTES (4 + LAYOUT_BYTES)
#define DIMENSIONS(type) ((int32_t *)((type) + 8))

Status LiteRtCreateEnvironment(int num_options, const void *options, Handle *environment);
Status LiteRtCreateModelFromFile(Handle environment, const char *path, Handle *model);
Status LiteRtCreateOptions(Handle *options);
Status LiteRtSetOptionsHardwareAccelerators(Handle options, int accelerators);
Status LiteRtCreateCompiledModel(Handle environment, Handle model, Handle options, Handle *compiled);
Status LiteRtGetModelSignature(Handle model, size_t index, Handle *signature);
Status LiteRtGetNumSignatureInputs(Handle signature, size_t *count);
Status LiteRtGetNumSignatureOutputs(Handle signature, size_t *count);
Status LiteRtGetSignatureInputName(Handle signature, size_t index, const char **name);
Status LiteRtGetSignatureOutputName(Handle signature, size_t index, const char **name);
Status LiteRtGetSignatureInputTensorByIndex(Handle signature, size_t index, Handle *tensor);
Status LiteRtGetSignatureOutputTensorByIndex(Handle signature, size_t index, Handle *tensor);
Status LiteRtGetRankedTensorType(Handle tensor, void *type);
Status LiteRtCompiledModelResizeInputTensor(Handle compiled, size_t signature, size_t index, const int *dims,
                                            size_t rank);
Status LiteRtGetCompiledModelOutputTensorLayouts(Handle compiled, size_t signature, size_t count, void *layouts,
                                                 bool update_allocation);
Status LiteRtGetCompiledModelInputBufferRequirements(Handle compiled, size_t signature, size_t index,
                                                     Handle *requirements);
Status LiteRtGetCompiledModelOutputBufferRequirements(Handle compiled, size_t signature, size_t index,
                                                      Handle *requirements);
Status LiteRtCreateManagedTensorBufferFromRequirements(Handle environment, const void *type, Handle requirements,
                                                       Handle *buffer);
Status LiteRtGetTensorBufferPackedSize(Handle buffer, size_t *size);
Status LiteRtLockTensorBuffer(Handle buffer, void **address, int mode);
Status LiteRtUnlockTensorBuffer(Handle buffer);
Status LiteRtRunCompiledModel(Handle compiled, size_t signature, size_t inputs, Handle *input_buffers, size_t outputs,
                              Handle *output_buffers);

static void check(Status status, const char *what) {
  if (!status) return;
  fprintf(stderr, "%s failed: LiteRT status %d\n", what, status);
  exit(1);
}
#define CHECK(call) check(call, #call)

static _Alignas(8) unsigned char input_types[MAX_TENSORS][TYPE_BYTES], output_types[MAX_TENSORS][TYPE_BYTES];
static _Alignas(8) unsigned char layouts[MAX_TENSORS][LAYOUT_BYTES];

static const char *input_file(int argc, char **argv, const char *name) {
  size_t len = strlen(name);
  for (int a = 3; a < argc; ++a)
    if (!strncmp(argv[a], name, len) && argv[a][len] == '=') return argv[a] + len + 1;
  fprintf(stderr, "no input named %s given\n", name);
  exit(2);
}

int main(int argc, char **argv) {
  int measure = argc > 1 && !strcmp(argv[1], "--measure");
  argv += measure, argc -= measure;
  if (argc < 3) {
    fprintf(stderr, "usage: %s [--measure] MODEL OUT_PREFIX NAME=IN.npy ...\n", argv[0]);
    return 2;
  }
  Handle environment, model, options, compiled, signature, inputs[MAX_TENSORS], outputs[MAX_TENSORS];
  size_t n_inputs, n_outputs;
  CHECK(LiteRtCreateEnvironment(0, NULL, &environment));
  CHECK(LiteRtCreateModelFromFile(environment, argv[1], &model));
  CHECK(LiteRtCreateOptions(&options));
  CHECK(LiteRtSetOptionsHardwareAccelerators(options, CPU));
  CHECK(LiteRtCreateCompiledModel(environment, model, options, &compiled));
  CHECK(LiteRtGetModelSignature(model, 0, &signature));
  CHECK(LiteRtGetNumSignatureInputs(signature, &n_inputs));
  CHECK(LiteRtGetNumSignatureOutputs(signature, &n_outputs));
  if (n_inputs > MAX_TENSORS || n_outputs > MAX_TENSORS) { fprintf(stderr, "too many tensors\n"); return 2; }
  for (size_t i = 0; i < n_inputs; ++i) {
    const char *name;
    Handle tensor, requirements;
    CHECK(LiteRtGetSignatureInputName(signature, i, &name));
    CHECK(LiteRtGetSignatureInputTensorByIndex(signature, i, &tensor));
    CHECK(LiteRtGetRankedTensorType(tensor, input_types[i]));
    const char *path = input_file(argc, argv, name);
    Npy x = npy_read(path);
    if (x.ndim > MAX_RANK) { fprintf(stderr, "%s: rank %d\n", path, x.ndim); return 2; }
    int dims[MAX_RANK], open = 0;
    for (int d = 0; d < x.ndim; ++d) {
      dims[d] = (int)x.shape[d];
      if (DIMENSIONS(input_types[i])[d] < 0) {                 /* a dimension the model leaves open */
        DIMENSIONS(input_types[i])[d] = dims[d];
        open = 1;
      }
    }
    if (open) CHECK(LiteRtCompiledModelResizeInputTensor(compiled, 0, i, dims, (size_t)x.ndim));
    CHECK(LiteRtGetCompiledModelInputBufferRequirements(compiled, 0, i, &requirements));
    CHECK(LiteRtCreateManagedTensorBufferFromRequirements(environment, input_types[i], requirements, &inputs[i]));
    size_t size, given = x.elements * (size_t)x.bytes;
    void *address;
    CHECK(LiteRtGetTensorBufferPackedSize(inputs[i], &size));
    if (size != given) { fprintf(stderr, "%s: %zu bytes, the input takes %zu\n", path, given, size); return 2; }
    CHECK(LiteRtLockTensorBuffer(inputs[i], &address, LOCK_WRITE));
    memcpy(address, x.data, size);
    CHECK(LiteRtUnlockTensorBuffer(inputs[i]));
    free(x.data);
  }
  CHECK(LiteRtGetCompiledModelOutputTensorLayouts(compiled, 0, n_outputs, layouts, true));
  for (size_t i = 0; i < n_outputs; ++i) {
    Handle tensor, requirements;
    CHECK(LiteRtGetSignatureOutputTensorByIndex(signature, i, &tensor));
    CHECK(LiteRtGetRankedTensorType(tensor, output_types[i]));
    memcpy(output_types[i] + 4, layouts[i], LAYOUT_BYTES);      /* the shapes after any resize */
    CHECK(LiteRtGetCompiledModelOutputBufferRequirements(compiled, 0, i, &requirements));
    CHECK(LiteRtCreateManagedTensorBufferFromRequirements(environment, output_types[i], requirements, &outputs[i]));
  }
  CHECK(LiteRtRunCompiledModel(compiled, 0, n_inputs, inputs, n_outputs, outputs));
  if (measure) {                                               /* that one a warm-up, this one read */
    mark();
    CHECK(LiteRtRunCompiledModel(compiled, 0, n_inputs, inputs, n_outputs, outputs));
    mark();
  }
  for (size_t i = 0; i < n_outputs; ++i) {
    const char *name;
    size_t size;
    void *address;
    char path[4096];
    CHECK(LiteRtGetSignatureOutputName(signature, i, &name));
    CHECK(LiteRtGetTensorBufferPackedSize(outputs[i], &size));
    CHECK(LiteRtLockTensorBuffer(outputs[i], &address, LOCK_READ));
    snprintf(path, sizeof path, "%s%zu.npy", argv[2], i);
    int64_t bytes[1] = {(int64_t)size};
    npy_write(path, 'u', 1, bytes, 1, address);
    CHECK(LiteRtUnlockTensorBuffer(outputs[i]));
    printf("out %zu %s\n", i, name);
  }
  if (measure) {
    char maps[4096];
    snprintf(maps, sizeof maps, "%smaps.txt", argv[2]);
    write_code_maps(maps);
  }
  return 0;
}
