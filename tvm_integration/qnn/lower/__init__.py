"""The one lowering every frontend's module takes, for x86 and Arm alike (pipeline.lower): legalize.py
(integer ops -> the forms the target's kernels take, and which operator each layer runs on), then
bind.py (each op by its kind: tensorized operators from tvm_integration.ops, bitserial_layer.py for
the low-bit layers, the rest scheduled by prim/)."""
