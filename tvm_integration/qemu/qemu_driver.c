/* Runs one TVM-compiled AArch64 function (its packed entry __tvm_ffi_main) without a TVM runtime, for
 * qemu-aarch64 (tvm_integration/qemu/cross.py builds it, statically linked with the operator's object).
 *
 *   driver [@NAME] ARG...
 *                      calls the function NAME (default main) of the table cross.link generates (the
 *                      entries __tvm_ffi_NAME of the objects linked in: several functions, one link);
 *                      each ARG is "code:bits:d0,d1,...:path": the tensor's DLDataType code and bits,
 *                      its shape (empty: a 0-d tensor), and a file holding its bytes in C order,
 *                      passed to the function in this order. An ARG written ">code:bits:...:path" is
 *                      an output: it is not read, it is filled with 0x5a bytes before the call (an
 *                      element the function never writes shows) and written to its file after it.
 *                      Without any ">" the LAST tensor is the one output.
 *
 * The object's only undefined symbol is TVMFFIErrorSetRaisedFromCStrParts (failed argument checks);
 * the runtime hooks it reaches through weak pointers (parallel launch, workspace) are defined here:
 * a parallel loop runs as one task, on this thread. Exit status: the function's, or 2 on bad usage. */
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void TVMFFIErrorSetRaisedFromCStrParts(const char *kind, const char **parts, int32_t n) {
  fprintf(stderr, "tvm error %s: ", kind);
  for (int i = 0; i < n; ++i) fputs(parts[i], stderr);
  fputc('\n', stderr);
}

void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message) {
  fprintf(stderr, "tvm error %s: %s\n", kind, message);
}

typedef struct {
  void *sync_handle;
  int32_t num_task;
} ParallelGroupEnv;
typedef int (*ParallelLambda)(int task_id, ParallelGroupEnv *env, void *cdata);

static int parallel_launch(ParallelLambda lambda, void *cdata, int num_task) {
  (void)num_task;
  ParallelGroupEnv env = {NULL, 1};
  return lambda(0, &env, cdata);
}

static void *workspace_alloc(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  (void)device_type; (void)device_id; (void)code; (void)bits;
  return aligned_alloc(64, (nbytes + 63) & ~(uint64_t)63);
}

static int workspace_free(int device_type, int device_id, void *ptr) {
  (void)device_type; (void)device_id;
  free(ptr);
  return 0;
}

int (*__TVMBackendParallelLaunch)(ParallelLambda, void *, int) = parallel_launch;
void *(*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = workspace_alloc;
int (*__TVMBackendFreeWorkspace)(int, int, void *) = workspace_free;

typedef int Packed(void *self, const TVMFFIAny *args, int32_t n, TVMFFIAny *ret);
extern const struct QsynthFunction { const char *name; Packed *entry; } QSYNTH_FUNCTIONS[];  /* NULL-ended */

#define MAX_DIMS 8

typedef struct {
  DLTensor tensor;
  int64_t shape[MAX_DIMS];
  const char *path;
  size_t nbytes;
  int output;
} Argument;

static int parse(const char *text, Argument *arg) {
  unsigned code, bits;
  int used = 0;
  memset(arg, 0, sizeof *arg);
  if (*text == '>') { arg->output = 1; ++text; }
  if (sscanf(text, "%u:%u:%n", &code, &bits, &used) != 2 || bits % 8) return -1;
  const char *p = text + used;
  size_t elements = 1;
  int ndim = 0;
  if (*p == ':') ++p;                                   /* a 0-d tensor */
  else for (;;) {
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p || ndim == MAX_DIMS || d < 0) return -1;
    arg->shape[ndim++] = d;
    elements *= (size_t)d;
    if (*end == ':') { p = end + 1; break; }
    if (*end != ',') return -1;
    p = end + 1;
  }
  arg->path = p;
  arg->nbytes = elements * (bits / 8);
  arg->tensor.device.device_type = kDLCPU;
  arg->tensor.ndim = ndim;
  arg->tensor.dtype.code = (uint8_t)code;
  arg->tensor.dtype.bits = (uint8_t)bits;
  arg->tensor.dtype.lanes = 1;
  arg->tensor.shape = arg->shape;
  arg->tensor.data = aligned_alloc(64, (arg->nbytes + 64) & ~(size_t)63);
  return arg->tensor.data ? 0 : -1;
}

static int transfer(Argument *arg, int write) {
  FILE *f = fopen(arg->path, write ? "wb" : "rb");
  if (!f) { perror(arg->path); return -1; }
  size_t done = write ? fwrite(arg->tensor.data, 1, arg->nbytes, f) : fread(arg->tensor.data, 1, arg->nbytes, f);
  fclose(f);
  if (done != arg->nbytes) { fprintf(stderr, "%s: %zu of %zu bytes\n", arg->path, done, arg->nbytes); return -1; }
  return 0;
}

int main(int argc, char **argv) {
  int named = argc > 1 && argv[1][0] == '@';
  const char *name = named ? argv[1] + 1 : "main";
  argv += named, argc -= named;
  const struct QsynthFunction *function = QSYNTH_FUNCTIONS;
  while (function->name && strcmp(function->name, name)) ++function;
  if (!function->name) { fprintf(stderr, "no function %s linked in\n", name); return 2; }
  int n = argc - 1, marked = 0;
  if (n < 1) { fprintf(stderr, "usage: %s [@NAME] [>]code:bits:d0,d1,...:path ... (> marks outputs; else the last is)\n", argv[0]); return 2; }
  Argument *args = calloc((size_t)n, sizeof *args);
  TVMFFIAny *packed = calloc((size_t)n, sizeof *packed);
  for (int i = 0; i < n; ++i) {
    if (parse(argv[i + 1], &args[i])) { fprintf(stderr, "bad argument %s\n", argv[i + 1]); return 2; }
    marked |= args[i].output;
  }
  if (!marked) args[n - 1].output = 1;
  for (int i = 0; i < n; ++i) {
    if (args[i].output ? (memset(args[i].tensor.data, 0x5a, args[i].nbytes), 0) : transfer(&args[i], 0)) return 2;
    packed[i].type_index = kTVMFFIDLTensorPtr;
    packed[i].v_ptr = &args[i].tensor;
  }
  TVMFFIAny ret;
  memset(&ret, 0, sizeof ret);
  ret.type_index = kTVMFFINone;
  int status = function->entry(NULL, packed, n, &ret);
  if (status != 0) { fprintf(stderr, "__tvm_ffi_%s returned %d\n", name, status); return status; }
  for (int i = 0; i < n; ++i)
    if (args[i].output && transfer(&args[i], 1)) return 2;
  return 0;
}
