"""Export the torchvision and Hugging Face models that ``ps.from_onnx`` is tested and
benchmarked on, with ``torch.onnx.export`` (random weights, batch 1, float32).

``python benchmarks/export_onnx_models.py --tiny [--out tests/data/onnx]``
    small variants of the seven models (tiny widths and depths, each file well under 1 MB),
    from both exporters (the TorchScript one, opset 17, and ``dynamo=True``, opset 18), with
    the example inputs and ONNX's reference outputs beside them (``<name>.npz``): the test
    suite imports, compiles and checks them without torch (tests/test_onnx_models.py).
``python benchmarks/export_onnx_models.py --full --out DIR [--models resnet50,...]``
    the canonical models benchmarks/bench_models.py compares every engine on: torchvision
    ResNet-50 and MobileNet-V2 (1x3x224x224) and Hugging Face BERT-base (sequence 128).

Needs the ``onnx-baseline`` extra (torch, torchvision, transformers, onnxscript).
"""

from __future__ import annotations

import argparse
import os
from typing import Callable, Dict, Tuple

import numpy as np

SEQ_TINY = 16


def _torch():
    import torch

    torch.manual_seed(0)
    # nn.MultiheadAttention's inference fast path is one fused operator no exporter knows
    torch.backends.mha.set_fastpath_enabled(False)
    return torch


# ----------------------------------------------------------------------------- the models


def resnet50(tiny: bool):
    """torchvision's ResNet-50 (Bottleneck blocks); tiny: one block per stage, widths / 16."""
    import torch.nn as nn
    from torchvision.models import resnet

    if not tiny:
        return resnet.resnet50(), ((1, 3, 224, 224),)
    m = resnet.ResNet(resnet.Bottleneck, [1, 1, 1, 1], num_classes=10)
    m.inplanes = 8
    m.conv1 = nn.Conv2d(3, 8, kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = nn.BatchNorm2d(8)
    m.layer1 = m._make_layer(resnet.Bottleneck, 4, 1)
    m.layer2 = m._make_layer(resnet.Bottleneck, 8, 1, stride=2)
    m.layer3 = m._make_layer(resnet.Bottleneck, 8, 1, stride=2)
    m.layer4 = m._make_layer(resnet.Bottleneck, 16, 1, stride=2)
    m.fc = nn.Linear(64, 10)
    return m, ((1, 3, 64, 64),)


def mobilenet_v2(tiny: bool):
    """torchvision's MobileNet-V2; tiny: width 0.25, one block per stage."""
    from torchvision.models import mobilenet_v2 as build

    if not tiny:
        return build(), ((1, 3, 224, 224),)
    setting = [[1, 16, 1, 1], [6, 24, 1, 2], [6, 32, 1, 2], [6, 64, 1, 2], [6, 96, 1, 1], [6, 160, 1, 2], [6, 320, 1, 1]]
    return build(width_mult=0.25, inverted_residual_setting=setting, num_classes=10), ((1, 3, 64, 64),)


def efficientnet_b0(tiny: bool):
    """torchvision's EfficientNet-B0 (SiLU, squeeze-excitation); tiny: width and depth 0.25."""
    from torchvision.models import efficientnet

    if not tiny:
        return efficientnet.efficientnet_b0(), ((1, 3, 224, 224),)
    setting, last = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    return efficientnet.EfficientNet(setting, dropout=0.2, last_channel=last, num_classes=10), ((1, 3, 64, 64),)


def vit_b_16(tiny: bool):
    """torchvision's ViT-B/16; tiny: 32x32 images, 2 layers of width 32."""
    from torchvision.models import vision_transformer as vt

    if not tiny:
        return vt.vit_b_16(), ((1, 3, 224, 224),)
    return vt.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                                num_classes=10), ((1, 3, 32, 32),)


def _text(model):
    """A Hugging Face model called with (input_ids, attention_mask), returning its last
    hidden state (no key-value cache)."""
    import torch

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            extra = {"use_cache": False} if "use_cache" in model.config.to_dict() else {}
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state

    return Text()


def bert_base(tiny: bool):
    """Hugging Face BERT-base (sequence 128); tiny: 2 layers of width 32."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig() if not tiny else BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    seq = SEQ_TINY if tiny else 128
    return _text(BertModel(cfg).eval()), ((1, seq), (1, seq))


def distilbert(tiny: bool):
    """Hugging Face DistilBERT; tiny: 2 layers of width 32."""
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig() if not tiny else DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2,
                                                              hidden_dim=64, max_position_embeddings=64)
    seq = SEQ_TINY if tiny else 128
    return _text(DistilBertModel(cfg).eval()), ((1, seq), (1, seq))


def gpt2(tiny: bool):
    """Hugging Face GPT-2 (causal mask, tanh GELU); tiny: 2 layers of width 32."""
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config() if not tiny else GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    seq = SEQ_TINY if tiny else 128
    return _text(GPT2Model(cfg).eval()), ((1, seq), (1, seq))


MODELS: Dict[str, Callable] = {
    "resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "efficientnet_b0": efficientnet_b0, "vit_b_16": vit_b_16,
    "bert_base": bert_base, "distilbert": distilbert, "gpt2": gpt2,
}
#: Which exporter each tiny model is exported with (both for two of them).
TINY_EXPORTERS = {
    "resnet50": ("torchscript", "dynamo"), "mobilenet_v2": ("torchscript",), "efficientnet_b0": ("dynamo",),
    "vit_b_16": ("torchscript",), "bert_base": ("torchscript", "dynamo"), "distilbert": ("dynamo",), "gpt2": ("torchscript",),
}


def randomize(model) -> None:
    """Random weights everywhere (torchvision zero-initialises some heads, and fresh batch
    norms have mean 0, variance 1): scaled so activations stay of order one."""
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) / max(1.0, p[0].numel()) ** 0.5)
            else:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))


def example_inputs(name: str, shapes: Tuple[Tuple[int, ...], ...], seed: int = 0) -> Dict[str, np.ndarray]:
    """Random inputs by ONNX input name: an image, or token ids and an attention mask
    whose last quarter is padding."""
    rng = np.random.default_rng(seed)
    if len(shapes) == 1:
        return {"x": rng.standard_normal(shapes[0]).astype(np.float32)}
    ids = rng.integers(0, 100, size=shapes[0]).astype(np.int64)
    mask = np.ones(shapes[1], np.int64)
    mask[:, -max(1, shapes[1][1] // 4):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def export(name: str, path: str, tiny: bool, exporter: str = "torchscript") -> Dict[str, np.ndarray]:
    """Export one model to ``path``; returns its example inputs."""
    torch = _torch()
    model, shapes = MODELS[name](tiny)
    model.eval()
    randomize(model)
    inputs = example_inputs(name, shapes)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(model, args, path, input_names=list(inputs), output_names=["y"], dynamo=True,
                              opset_version=18, external_data=False)
        else:
            torch.onnx.export(model, args, path, input_names=list(inputs), output_names=["y"], dynamo=False,
                              opset_version=17, do_constant_folding=True)
    return inputs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--tiny", action="store_true", help="the small test variants, both exporters")
    size.add_argument("--full", action="store_true", help="the canonical benchmark models")
    p.add_argument("--out", default=None, help="output directory (default tests/data/onnx with --tiny)")
    p.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    args = p.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "onnx")
    os.makedirs(out, exist_ok=True)
    names = args.models.split(",") if args.models else (list(MODELS) if args.tiny else ["resnet50", "mobilenet_v2", "bert_base"])
    from onnx.reference import ReferenceEvaluator

    for name in names:
        for exporter in (TINY_EXPORTERS[name] if args.tiny else ("torchscript",)):
            stem = f"{name}_{exporter}" if args.tiny else name
            path = os.path.join(out, stem + ".onnx")
            inputs = export(name, path, args.tiny, exporter)
            if args.tiny:  # the reference the tests check against, made once here
                try:
                    ref, by = ReferenceEvaluator(path).run(None, inputs)[0], "onnx.reference"
                except Exception as exc:  # onnx.reference fails on some exports: ONNX Runtime instead
                    import onnxruntime as ort

                    print(f"{stem}: onnx.reference failed ({type(exc).__name__}: {exc}); ONNX Runtime's output instead")
                    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                    ref, by = sess.run(None, inputs)[0], "onnxruntime"
                np.savez(os.path.join(out, stem + ".npz"), expected=ref, reference=np.asarray(by), **inputs)
            print(f"{path}: {os.path.getsize(path) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
