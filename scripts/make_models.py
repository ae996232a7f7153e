#!/usr/bin/env python3
"""Write the built-in models, pre-quantized by onnxruntime.quantization (QDQ, u8 activations, s8
per-channel weights) next to their float originals, for ``qsynth run`` / ``bench-model``:

    python scripts/make_models.py DIR [--models resnet18,mobilenet_v2]   ->  DIR/NAME.int8.onnx, DIR/NAME.fp32.onnx
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tvm_integration.bench.int8_models import BUILT_IN, write_pair  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--models", default=",".join(BUILT_IN))
    a = ap.parse_args()
    unknown = sorted(set(a.models.split(",")) - set(BUILT_IN))
    if unknown:
        ap.error(f"unknown models {unknown}; built in: {', '.join(BUILT_IN)}")
    a.directory.mkdir(parents=True, exist_ok=True)
    logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
    for name in a.models.split(","):
        for path in write_pair(name, a.directory):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
