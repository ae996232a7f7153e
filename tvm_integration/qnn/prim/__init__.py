"""PrimFuncs of qsynth's own beside the tensorized operators, and how each is scheduled and called:
schedules.py (the schedule of every reference computation bind leaves to TE), prim_calls.py (a
PrimFunc added to the model and called), the channel gather (gather.py), the 8-bit table lookup
(table_lookup.py) and AArch64's input quantization (neon_quantize.py)."""
