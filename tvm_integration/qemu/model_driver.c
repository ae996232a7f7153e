/* Runs a whole compiled Relax model (a VM executable exported as an AArch64 shared library) under
 * qemu-aarch64, with TVM's own C++ runtime for AArch64 (libtvm_runtime.so and libtvm_ffi.so from the
 * aarch64 wheels) and no Python: tvm_integration/qemu/cross_model.py builds and runs it.
 *
 *   model_driver [--measure] LIBRARY OUT_PREFIX [IN.npy ...] [-- OUT_PREFIX [IN.npy ...]] ...
 *   model_driver --missing NAME ...
 *
 * loads LIBRARY (ffi.ModuleLoadFromFile), makes its VM (vm_load_executable, vm_initialization on the
 * CPU with the pooled allocator, as tvm.relax.VirtualMachine does), and for each run (an OUT_PREFIX and
 * its inputs, runs apart by "--": several inputs cost one qemu start) calls "main" on the inputs (NumPy
 * .npy files, C order, little endian), writes the outputs, a tuple's leaves in order, to OUT_PREFIX0.npy,
 * OUT_PREFIX1.npy, ... and prints "N outputs". It uses only tvm-ffi's C API (this host has no AArch64 C++
 * compiler). --measure (one run only): run "main" once more between two marks and write the code's
 * mappings to OUT_PREFIXmaps.txt (measure.h: one inference costed by bench/qemu_blocks.py). --missing: print the
 * NAMEs this runtime registers no global function for, a line each (what a model compiled for it may
 * call: cross_model.missing_functions). Exit status: 0, 1 when TVM raised an error (printed), 2 on bad
 * usage or files. */
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"
#include "npy.h"

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

/* ---- .npy files (npy.h) as TVM tensors ---- */
static int dl_code(char kind) { return kind == 'i' ? kDLInt : kind == 'u' ? kDLUInt : kind == 'f' ? kDLFloat : kDLBool; }

static void deleter(DLManagedTensor *self) {
  free(self->dl_tensor.data);
  free(self->dl_tensor.shape);
  free(self);
}

static TVMFFIObjectHandle read_npy(const char *path) {
  Npy a = npy_read(path);
  DLManagedTensor *t = calloc(1, sizeof *t);
  int64_t *shape = calloc(NPY_MAX_DIMS, sizeof *shape);
  memcpy(shape, a.shape, sizeof a.shape);
  t->dl_tensor.data = a.data;
  t->dl_tensor.device.device_type = kDLCPU;
  t->dl_tensor.ndim = a.ndim;
  t->dl_tensor.dtype.code = (uint8_t)dl_code(a.kind);
  t->dl_tensor.dtype.bits = (uint8_t)(a.bytes * 8);
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
  if (t->strides)                                           /* compact row-major only */
    for (int i = t->ndim - 1, expected = 1; i >= 0; expected *= (int)t->shape[i], --i)
      if (t->shape[i] != 1 && t->strides[i] != expected) { fprintf(stderr, "%s: strided output\n", path); exit(2); }
  npy_write(path, kinds[t->dtype.code], t->dtype.bits / 8, t->shape, t->ndim, (char *)t->data + t->byte_offset);
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

static int print_missing(int n, char **names) {
  for (int i = 0; i < n; ++i) {
    TVMFFIByteArray bytes = {names[i], strlen(names[i])};
    TVMFFIObjectHandle f = NULL;
    if (TVMFFIFunctionGetGlobal(&bytes, &f)) fail_raised(names[i]);
    if (f) TVMFFIObjectDecRef(f);
    else printf("%s\n", names[i]);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--missing")) return print_missing(argc - 2, argv + 2);
  int measure = argc > 1 && !strcmp(argv[1], "--measure");
  argv += measure, argc -= measure;
  if (argc < 3) {
    fprintf(stderr, "usage: %s [--measure] LIBRARY OUT_PREFIX [IN.npy ...] [-- OUT_PREFIX [IN.npy ...]] ...\n",
            argv[0]);
    return 2;
  }
  for (int i = 3; measure && i < argc; ++i)
    if (!strcmp(argv[i], "--")) { fprintf(stderr, "--measure measures one run\n"); return 2; }
  TVMFFIAny path = str(argv[1]);
  TVMFFIAny library = call("loading the library", global("ffi.ModuleLoadFromFile"), &path, 1);
  TVMFFIAny vm = call("vm_load_executable", function_of(library, "vm_load_executable"), NULL, 0);
  TVMFFIAny init[3] = {integer(kDLCPU), integer(0), integer(2)};   /* the CPU, the pooled allocator */
  call("vm_initialization", function_of(vm, "vm_initialization"), init, 3);
  TVMFFIObjectHandle main_function = function_of(vm, "main");
  TVMFFIAny *inputs = calloc((size_t)argc, sizeof *inputs);
  for (int at = 2; at < argc; at += 2) {             /* a run: OUT_PREFIX, then its inputs up to "--" */
    const char *prefix = argv[at];
    int n = 0;
    for (; at + 1 < argc && strcmp(argv[at + 1], "--"); ++n) {
      inputs[n].type_index = kTVMFFITensor;
      inputs[n].v_obj = read_npy(argv[++at]);
    }
    TVMFFIAny result = call("main", main_function, inputs, n);
    if (measure) {
      if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
      mark();
      result = call("main", main_function, inputs, n);
      mark();
      char maps[4096];
      snprintf(maps, sizeof maps, "%smaps.txt", prefix);
      write_code_maps(maps);
    }
    printf("%d outputs\n", write_outputs(prefix, result, 0));
    if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
    for (int i = 0; i < n; ++i) TVMFFIObjectDecRef(inputs[i].v_obj);
  }
  return 0;
}
