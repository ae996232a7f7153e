"""The Convs of a QDQ model onnxruntime computes in float (ort_fusion.float_layers: its x86 build, or its
AArch64 build for neon), as it computes them: MLAS's Conv (float/float_conv.py), and the FusedConv its
ConvAddActivationFusion makes.

That fusion takes a Conv with a bias whose output only an Add reads, the Add's two inputs 4-D of one
shape (PT2E's residual blocks, ``Conv -> Add -> Relu -> Q``): the Add's other operand becomes the Conv's
Sum input. Its output starts as a copy of that operand, MLAS's Conv adds each K block's sums onto it
(Beta = 1), then the bias (MlasActivation): ``((z + s0) + s1 ...) + bias``, not the graph's ``(conv +
bias) + z``, which rounds differently (109 487 of the 200 704 values of a PT2E ResNet block's Add
differed). A Conv without a bias is not fused (the selector skips it): its Add stays a float add."""
from __future__ import annotations

from tvm import relax

from tvm_integration.qnn.float.float_calls import emit, shape_of
from tvm_integration.qnn.float.float_conv import conv2d_func

LAYER, WHY = "qsynth.float_layer", "qsynth.float_why"     # the function's ONNX node and why it is float


def conv(reader, call, summand=None):
    """A conv2d of the float layers as onnxruntime's x86 Conv sums it, from ``summand`` where given;
    None for a form float_conv.py does not take (TVM's own conv2d then)."""
    a = call.attrs
    shapes = [shape_of(arg) for arg in (*call.args, call)]
    if any(s is None or len(s) != 4 for s in shapes) or int(a.groups) != 1 or str(a.data_layout) != "NCHW" \
            or str(a.kernel_layout) != "OIHW" or any(int(d) != 1 for d in a.dilation):
        return None
    image = reader.dequantized(call.args[0])   # DQ(x) per tensor: dequantized as the conv pads its input
    dequantize = None
    if image is not None and image[1].per_tensor_8bit and image[1].dtype in ("int8", "uint8"):
        scale, zero_point = image[1].scalar("a float conv's input")
        dequantize = (float(scale), int(zero_point), image[1].dtype)
    func = conv2d_func(shapes[0], shapes[1], [int(s) for s in a.strides], [int(p) for p in a.padding],
                       dequantize, summand is not None)
    readers = reader.readers(reader.bound[call]) if call in reader.bound else []
    name = reader.layer_name(call, *(r for r in readers if r is not None))
    why = reader.float_layers.get(name, "") + ("; with the Add after it one FusedConv, summing onto the Add's "
                                               "other operand" if summand is not None else "")
    func = func.with_attr(LAYER, name).with_attr(WHY, why)
    weights = reader.dequantized_weights(call.args[1])      # computed once, not at every run
    return emit(reader.builder_, func, "qsynth_float_conv2d",
                [reader.visit_expr(image[0] if dequantize else call.args[0]),
                 reader.visit_expr(call.args[1]) if weights is None else weights,
                 *([] if summand is None else [summand])], shapes[2])


def summed(reader, add) -> tuple | None:
    """(the float conv2d call, its bias expression, the Add's other operand) when onnxruntime fuses the
    relax ``add`` into the Conv before it, else None."""
    shapes = [shape_of(arg) for arg in add.args]
    if len(shapes) != 2 or any(s is None or len(s) != 4 for s in shapes) or shapes[0] != shapes[1]:
        return None
    for index in (0, 1):
        var = add.args[index]
        biased = reader.call(var, "relax.add")
        if biased is None or not isinstance(var, relax.Var) or reader.readers(var) != [add]:
            continue
        core = reader.call(biased.args[0], "relax.nn.conv2d")
        per_channel = shape_of(biased.args[1]) in ((1, shapes[0][1], 1, 1), (shapes[0][1], 1, 1))   # the Conv's bias
        if core is not None and core in reader.float_cores and per_channel:
            return core, biased.args[1], add.args[1 - index]
    return None


def fused(reader, add):
    """The FusedConv of ``add`` (``summed``), bias added after, else None."""
    found = summed(reader, add)
    if found is None or (new := conv(reader, found[0], reader.visit_expr(found[2]))) is None:
        return None
    return relax.op.add(reader.builder_.emit(new), reader.visit_expr(found[1]))


def fused_later(reader, core) -> bool:
    """Whether the float conv2d call ``core`` is computed by the FusedConv of the Add after it."""
    biased = reader.readers(reader.bound[core]) if core in reader.bound else []
    if len(biased) != 1 or biased[0] is None or biased[0] not in reader.bound:
        return False
    adds = reader.readers(reader.bound[biased[0]])
    return len(adds) == 1 and adds[0] is not None and summed(reader, adds[0]) is not None
