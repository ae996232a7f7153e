"""A model compiled and run: model.py (compile_model: the file through its frontend, lower, the build;
the compiled model's run, save and load), arm_model.py (the same for --target neon, run under qemu),
artifacts.py (qsynth run's private, checked cache of compiled models), arm_reference.py (what an Arm
build is exact against, op kind by op kind) and report.py (each layer's precision and kernel:
``qsynth inspect``)."""
