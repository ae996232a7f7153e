#!/usr/bin/env python3
"""The zoo's architectures in small (issue 31 item 2): blocks of each family built from torchvision's
and transformers' own module classes, at a few channels and a small image, so that the test suite
runs every architecture of scripts/make_zoo.py without torch (tests/test_zoo_blocks.py, against
onnxruntime). Random seeded weights; every BatchNorm's running statistics and affine parameters,
every LayerNorm's scale and bias and BERT's biases random too (fresh ones are the identity or zero,
which would hide their arithmetic). Exported and quantized as make_zoo.py does (its ``export_module``
and ``quantize``: torch's exporter at opset 18, quantize_static QDQ u8/s8 per-channel on 8 random
inputs); the BERT encoder also by ``quantize_dynamic`` (s8 weights). Writes ``NAME.int8.onnx`` for each
of BLOCKS and ENCODERS into --out (default tests/data/zoo, the committed fixtures: byte for byte the same
on a rerun); the float originals stay in a temporary folder.

Needs torch 2.13 and torchvision 0.28 (as make_zoo.py) and transformers 5.23, none a test dependency,
kept out of the main environment in a folder on PYTHONPATH, e.g. (--no-deps: the rest of transformers'
requirements, numpy among them, come from the main environment):

    pip install --target /tmp/torchenv --no-deps transformers==5.23.0 huggingface-hub==2.4.0 \
        tokenizers==0.23.3 safetensors==0.8.0 httpx2==2.16.2 httpcore2==2.16.2 anyio==4.16.0 h11==0.16.0 \
        truststore==0.10.5

Regenerate:

    PYTHONPATH=/tmp/torchenv python3 scripts/make_zoo_blocks.py [--blocks resnet,bert_static,...] [--out DIR]
"""
from __future__ import annotations

import argparse
import functools
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import make_zoo  # noqa: E402
from synth.files import write_atomically  # noqa: E402

CALIBRATION = 8
BERT = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 16, "type_vocab_size": 2}
SEQUENCE = 8
BERT_SEED = 10


def _resnet(nn):
    """Bottleneck with a strided projection shortcut, and ResNet's head (pool, flatten, Linear)."""
    from torchvision.models.resnet import Bottleneck
    down = nn.Sequential(nn.Conv2d(16, 32, 1, 2, bias=False), nn.BatchNorm2d(32))
    return nn.Sequential(Bottleneck(16, 8, 2, down), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)), \
        (1, 16, 16, 16)


def _mobilenet_v3(nn):
    """InvertedResidual with hardswish, squeeze-excite (hardsigmoid) and the residual add."""
    from torchvision.models.mobilenetv3 import InvertedResidual, InvertedResidualConfig
    norm = functools.partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
    return InvertedResidual(InvertedResidualConfig(16, 3, 48, 16, True, "HS", 1, 1, 1.0), norm), (1, 16, 16, 16)


def _efficientnet(nn):
    """MBConv with SiLU, squeeze-excite (sigmoid) and the residual add."""
    from torchvision.models.efficientnet import MBConv, MBConvConfig
    return MBConv(MBConvConfig(6, 3, 1, 16, 16, 1), 0.0, functools.partial(nn.BatchNorm2d, eps=0.001)), \
        (1, 16, 16, 16)


def _shufflenet_v2(nn):
    """InvertedResidual strided (two branches) and not (a channel split), each ending in the shuffle."""
    from torchvision.models.shufflenetv2 import InvertedResidual
    return nn.Sequential(InvertedResidual(24, 48, 2), InvertedResidual(48, 48, 1)), (1, 24, 16, 16)


def _densenet(nn):
    """_DenseBlock of two layers (pre-activation BN -> ReLU -> conv, concatenated) and a _Transition."""
    from torchvision.models.densenet import _DenseBlock, _Transition
    return nn.Sequential(_DenseBlock(2, 16, 4, 8, 0.0), _Transition(32, 16)), (1, 16, 16, 16)


def _regnet(nn):
    """ResBottleneckBlock, strided: group convolution (group width 8), squeeze-excite, projection."""
    from torchvision.models.regnet import ResBottleneckBlock
    return ResBottleneckBlock(16, 32, 2, nn.BatchNorm2d, nn.ReLU, group_width=8, bottleneck_multiplier=1.0,
                              se_ratio=0.25), (1, 16, 16, 16)


def _googlenet(nn):
    """Inception (four branches, its 3x3 max pool with ceil_mode) and GoogLeNet's ceil_mode 3x3/2 pool."""
    from torchvision.models.googlenet import Inception
    return nn.Sequential(Inception(16, 8, 8, 16, 4, 8, 8), nn.MaxPool2d(3, 2, ceil_mode=True)), (1, 16, 15, 15)


def _squeezenet(nn):
    """Fire (squeeze, two expands concatenated), SqueezeNet's ceil_mode 3x3/2 max pool and its head
    (1x1 conv, ReLU, global average pool, flatten)."""
    from torchvision.models.squeezenet import Fire
    return nn.Sequential(Fire(16, 8, 16, 16), nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(32, 10, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten()), (1, 16, 15, 15)


def _convnext(nn):
    """ConvNeXt's patchify stem with LayerNorm2d and a CNBlock (7x7 depthwise, LayerNorm, Linear, GELU,
    Linear, layer scale, residual add)."""
    from torchvision.models.convnext import CNBlock, LayerNorm2d
    return nn.Sequential(nn.Conv2d(3, 16, 4, 4), LayerNorm2d(16), CNBlock(16, 0.5, 0.0)), (1, 3, 32, 32)


BLOCKS = {"resnet": _resnet, "mobilenet_v3": _mobilenet_v3, "efficientnet": _efficientnet,
          "shufflenet_v2": _shufflenet_v2, "densenet": _densenet, "regnet": _regnet, "googlenet": _googlenet,
          "squeezenet": _squeezenet, "convnext": _convnext}
ENCODERS = {"bert_static": "static", "bert_dynamic": "dynamic"}


def randomize(model, seed: int) -> None:
    """Every BatchNorm's running mean and variance, every norm's scale and bias, and every bias its
    initialization leaves at zero (BERT's), drawn at random."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(0.2 * torch.randn(m.num_features, generator=g))
                m.running_var.copy_(0.5 + 1.5 * torch.rand(m.num_features, generator=g))
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm)) and m.weight is not None:
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
            elif isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and m.bias is not None and not m.bias.any():
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


def build_block(name: str, work: Path) -> Path:
    """The block ``name`` with random weights (its seed: its place in BLOCKS), exported and quantized in
    ``work``."""
    import torch
    seed = list(BLOCKS).index(name) + 1
    torch.manual_seed(seed)
    make_zoo.torchvision_models()                   # torchvision without its operators, before its modules
    model, shape = BLOCKS[name](torch.nn)
    model.eval()
    randomize(model, seed)
    fp32, int8 = work / f"{name}.fp32.onnx", work / f"{name}.int8.onnx"
    make_zoo.export_module(model, {"input": torch.randn(shape)}, ["output"], fp32)
    make_zoo.quantize(fp32, int8, make_zoo.normal_inputs(shape, CALIBRATION))
    return int8


def bert_feeds(count: int) -> list[dict[str, np.ndarray]]:
    """Calibration feeds of the encoder: ids within the vocabulary, masks of ones then zeros (padding)."""
    rng = np.random.default_rng(0)
    feeds = []
    for _ in range(count):
        mask = (np.arange(SEQUENCE) < rng.integers(SEQUENCE // 2, SEQUENCE + 1)).astype(np.int64)[None]
        feeds.append({"input_ids": rng.integers(0, BERT["vocab_size"], (1, SEQUENCE)), "attention_mask": mask})
    return feeds


def export_bert(path: Path) -> None:
    """transformers' BertModel of BERT's config, one layer, eager attention, to ``path``: inputs
    input_ids and attention_mask int64[1, SEQUENCE], outputs last_hidden_state and pooler_output."""
    import torch
    make_zoo.torchvision_models()                   # transformers imports torchvision: without its operators
    from transformers import BertConfig, BertModel
    torch.manual_seed(BERT_SEED)
    model = BertModel(BertConfig(**BERT, attn_implementation="eager", return_dict=False)).eval()
    randomize(model, BERT_SEED)
    feed = bert_feeds(1)[0]
    make_zoo.export_module(model, {k: torch.from_numpy(v) for k, v in feed.items()},
                           ["last_hidden_state", "pooler_output"], path)


def build_encoder(name: str, work: Path) -> Path:
    """The BERT encoder (one float model for both) quantized in ``work`` by quantize_static (QDQ, as
    the blocks) or quantize_dynamic."""
    fp32, int8 = work / "bert.fp32.onnx", work / f"{name}.int8.onnx"
    if not fp32.exists():
        export_bert(fp32)
    if ENCODERS[name] == "static":
        make_zoo.quantize(fp32, int8, bert_feeds(CALIBRATION))
    else:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return int8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = list(BLOCKS) + list(ENCODERS)
    ap.add_argument("--blocks", default=",".join(names))
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "zoo")
    a = ap.parse_args()
    chosen = a.blocks.split(",")
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        ap.error(f"unknown blocks {unknown}; known: {', '.join(names)}")
    a.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
    with tempfile.TemporaryDirectory() as work:
        for name in chosen:
            build = build_block if name in BLOCKS else build_encoder
            path = write_atomically(a.out / f"{name}.int8.onnx", build(name, Path(work)).read_bytes())
            print(f"{name}: {path} ({path.stat().st_size / 1e3:.0f} kB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
