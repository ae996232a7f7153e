/* Runs a whole compiled Relax model (a VM executable exported as an AArch64 shared library) under
 * qemu-aarch64, with TVM's own C++ runtime for AArch64 (libtvm_runtime.so and libtvm_ffi.so from the
 * aarch64 wheels) and no Python: tvm_integration/ops/cross_model.py builds and runs it.
 *
 *   model_driver LIBRARY OUT_PREFIX [IN.npy ...]
 *
 * loads LIBRARY (ffi.ModuleLoadFromFile), makes its VM (vm_load_executable, vm_initialization on the
 * CPU with the pooled allocator, as tvm.relax.VirtualMachine does), calls "main" on the inputs (NumPy
 * .npy files, C order, little endian) and writes the outputs, a tuple's leaves in order, to
 * OUT_PREFIX0.npy, OUT_PREFIX1.npy, ... It uses only tvm-ffi's C API (this host has no AArch64 C++
 * compiler). Exit status: 0, 1 when TVM raised an error (printed), 2 on bad usage or files. */
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 16

static void fail_raised(const char *what) {
  TVMFFIObjectHandle error = NULL;
  TVMFFIErrorMoveFromRaised(&error);
  fprintf(stderr, "%s failed", what);
  if (error) {   /* the error's cell follows its object header (TVMFFIErrorGetCellPtr, C++ only) */
    TVMFFIErrorCell *cell = (TVMFFIErrorCell *)((char *)error + sizeof(TVMFFIObject));
    fprintf(stderr, ": %.*s: %.*s\n%.*s", (int)cell->kind.size, cell->kind.data, (int)cell->message.size,
            cell->message.data, (int)cell->backtrace.size, cell->backtrace.data);
  }
  fputc('\n', stderr);
  exit(1);
}

static TVMFFIObjectHandle global(const char *name) {
  TVMFFIByteArray bytes = {name, strlen(name)};
  TVMFFIObjectHandle f = NULL;
  if (TVMFFIFunctionGetGlobal(&bytes, &f) || !f) { fprintf(stderr, "no global function %s\n", name); exit(2); }
  return f;
}

static TVMFFIAny call(const char *what, TVMFFIObjectHandle f, TVMFFIAny *args, int n) {
  TVMFFIAny ret;
  memset(&ret, 0, sizeof ret);
  ret.type_index = kTVMFFINone;
  if (TVMFFIFunctionCall(f, args, n, &ret)) fail_raised(what);
  return ret;
}

static TVMFFIAny str(const char *s) {
  TVMFFIAny a;
  memset(&a, 0, sizeof a);
  a.type_index = kTVMFFIRawStr;
  a.v_c_str = s;
  return a;
}

static TVMFFIAny integer(int64_t v) {
  TVMFFIAny a;
  memset(&a, 0, sizeof a);
  a.type_index = kTVMFFIInt;
  a.v_int64 = v;
  return a;
}

static TVMFFIAny object(TVMFFIAny value) {   /* as an argument: the same handle, viewed */
  return value;
}

/* module.get_function(name), imports included */
static TVMFFIObjectHandle function_of(TVMFFIAny module, const char *name) {
  TVMFFIAny args[3] = {object(module), str(name), integer(1)};
  args[2].type_index = kTVMFFIBool;
  TVMFFIAny f = call(name, global("ffi.ModuleGetFunction"), args, 3);
  if (f.type_index != kTVMFFIFunction) { fprintf(stderr, "the module has no function %s\n", name); exit(2); }
  return f.v_obj;
}

/* ---- .npy files ---- */
typedef struct {
  char kind;        /* 'i', 'u', 'f', 'b' */
  int bytes;
} Descr;

static int dl_code(char kind) { return kind == 'i' ? kDLInt : kind == 'u' ? kDLUInt : kind == 'f' ? kDLFloat : kDLBool; }

static void deleter(DLManagedTensor *self) {
  free(self->dl_tensor.data);
  free(self->dl_tensor.shape);
  free(self);
}

static TVMFFIObjectHandle read_npy(const char *path) {
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
  Descr descr = {d[1], atoi(d + 2)};
  DLManagedTensor *t = calloc(1, sizeof *t);
  int64_t *shape = calloc(MAX_DIMS, sizeof *shape);
  int ndim = 0;
  size_t elements = 1;
  const char *p = strchr(s, '(') + 1;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ')') break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || ndim == MAX_DIMS) { fprintf(stderr, "%s: bad shape\n", path); exit(2); }
    shape[ndim++] = v;
    elements *= (size_t)v;
    p = end;
  }
  size_t nbytes = elements * (size_t)descr.bytes;
  void *data = aligned_alloc(64, (nbytes + 64) & ~(size_t)63);
  if (fread(data, 1, nbytes, f) != nbytes) { fprintf(stderr, "%s: short data\n", path); exit(2); }
  fclose(f);
  free(header);
  t->dl_tensor.data = data;
  t->dl_tensor.device.device_type = kDLCPU;
  t->dl_tensor.ndim = ndim;
  t->dl_tensor.dtype.code = (uint8_t)dl_code(descr.kind);
  t->dl_tensor.dtype.bits = (uint8_t)(descr.bytes * 8);
  t->dl_tensor.dtype.lanes = 1;
  t->dl_tensor.shape = shape;
  t->deleter = deleter;
  TVMFFIObjectHandle tensor = NULL;
  if (TVMFFITensorFromDLPack(t, 0, 1, &tensor)) fail_raised("TVMFFITensorFromDLPack");
  return tensor;
}

static void write_npy(const char *path, const DLTensor *t) {
  static const char kinds[] = {[kDLInt] = 'i', [kDLUInt] = 'u', [kDLFloat] = 'f', [kDLBool] = 'b'};
  if (t->dtype.code > kDLBool || !kinds[t->dtype.code] || t->dtype.lanes != 1 || t->device.device_type != kDLCPU) {
    fprintf(stderr, "%s: cannot write dtype code %d bits %d lanes %d\n", path, t->dtype.code, t->dtype.bits,
            t->dtype.lanes);
    exit(2);
  }
  char header[512], shape[400] = "";
  size_t elements = 1;
  for (int i = 0; i < t->ndim; ++i) {
    char dim[32];
    snprintf(dim, sizeof dim, "%lld,%s", (long long)t->shape[i], t->ndim > 1 && i < t->ndim - 1 ? " " : "");
    strncat(shape, dim, sizeof shape - strlen(shape) - 1);
    elements *= (size_t)t->shape[i];
  }
  if (t->ndim > 1) shape[strlen(shape) - 1] = '\0';        /* (2, 3) but (5,) */
  if (t->strides)                                           /* compact row-major only */
    for (int i = t->ndim - 1, expected = 1; i >= 0; expected *= (int)t->shape[i], --i)
      if (t->shape[i] != 1 && t->strides[i] != expected) { fprintf(stderr, "%s: strided output\n", path); exit(2); }
  int n = snprintf(header, sizeof header, "{'descr': '%c%c%d', 'fortran_order': False, 'shape': (%s), }",
                   t->dtype.bits == 8 ? '|' : '<', kinds[t->dtype.code], t->dtype.bits / 8, shape);
  int total = (10 + n + 1 + 63) / 64 * 64;                  /* magic + header + '\n', 64-byte aligned */
  memset(header + n, ' ', (size_t)(total - 10 - n - 1));
  header[total - 10 - 1] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f) { perror(path); exit(2); }
  unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((total - 10) & 0xff),
                             (unsigned char)((total - 10) >> 8)};
  size_t nbytes = elements * (t->dtype.bits / 8);
  if (fwrite(magic, 1, 10, f) != 10 || fwrite(header, 1, (size_t)(total - 10), f) != (size_t)(total - 10) ||
      fwrite((char *)t->data + t->byte_offset, 1, nbytes, f) != nbytes) { perror(path); exit(2); }
  fclose(f);
}

/* Write a tensor, or a tuple's leaves depth first; returns the next output index. */
static int write_outputs(const char *prefix, TVMFFIAny value, int index) {
  char path[4096];
  if (value.type_index == kTVMFFITensor) {
    snprintf(path, sizeof path, "%s%d.npy", prefix, index);
    write_npy(path, (DLTensor *)((char *)value.v_obj + sizeof(TVMFFIObject)));
    return index + 1;
  }
  if (value.type_index == kTVMFFIDLTensorPtr) {
    snprintf(path, sizeof path, "%s%d.npy", prefix, index);
    write_npy(path, (DLTensor *)value.v_ptr);
    return index + 1;
  }
  if (value.type_index == kTVMFFIArray) {
    TVMFFIAny size = call("ffi.ArraySize", global("ffi.ArraySize"), &value, 1);
    for (int64_t i = 0; i < size.v_int64; ++i) {
      TVMFFIAny args[2] = {value, integer(i)};
      index = write_outputs(prefix, call("ffi.ArrayGetItem", global("ffi.ArrayGetItem"), args, 2), index);
    }
    return index;
  }
  fprintf(stderr, "output %d: not a tensor nor a tuple (type index %d)\n", index, value.type_index);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s LIBRARY OUT_PREFIX [IN.npy ...]\n", argv[0]); return 2; }
  TVMFFIAny path = str(argv[1]);
  TVMFFIAny library = call("loading the library", global("ffi.ModuleLoadFromFile"), &path, 1);
  TVMFFIAny vm = call("vm_load_executable", function_of(library, "vm_load_executable"), NULL, 0);
  TVMFFIAny init[3] = {integer(kDLCPU), integer(0), integer(2)};   /* the CPU, the pooled allocator */
  call("vm_initialization", function_of(vm, "vm_initialization"), init, 3);
  int n = argc - 3;
  TVMFFIAny *inputs = calloc((size_t)n + 1, sizeof *inputs);
  for (int i = 0; i < n; ++i) {
    inputs[i].type_index = kTVMFFITensor;
    inputs[i].v_obj = read_npy(argv[i + 3]);
  }
  TVMFFIAny result = call("main", function_of(vm, "main"), inputs, n);
  printf("%d outputs\n", write_outputs(argv[2], result, 0));
  return 0;
}
