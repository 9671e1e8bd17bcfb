#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes ONNX CNNs with generated weights for tandem::cnn's tests and benchmarks.

Real architectures (layer shapes as published): resnet18, resnet34, resnet50, mobilenet_v2,
vgg16, alexnet, inception_v3, yolov5s (v5-style: SiLU, C3 blocks, SPPF, upsample + concat, three
detection heads), yolov2 (Darknet-19 + passthrough, 448x448 as in PICO's evaluation; the reorg is
written as a fixed one-hot 2x2 stride-2 conv, which computes space-to-depth exactly) and yolov2_tiny
(LeakyReLU, max-pool chain); plus tiny graphs that exercise
every supported op (tiny_*). Weights are random (He-scaled normal), BatchNormalization layers keep
their own statistics so the importer's folding is exercised.

With --reference (needs onnxruntime) each model also gets a reference run: NAME.input.bin
(float32, a fixed-seed normal image), NAME.output.bin (all outputs, float32, concatenated in
order) and NAME.json (shapes) -- what tests/cnn/models_test.cpp compares against.

Usage: gen_models.py --out DIR [--models a,b,...|all|tiny|bench] [--reference] [--skip-existing]
Needs: pip install onnx numpy (and onnxruntime for --reference).
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class Net:
    """A tiny graph builder that tracks (C, H, W) of every value."""

    def __init__(self, name, shape, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.shapes = {"input": tuple(shape[1:])}
        self.batch = shape[0]
        self.input_shape = shape
        self.count = 0

    def fresh(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, base, arr, ints=False):
        name = self.fresh(base)
        t = numpy_helper.from_array(np.asarray(arr, np.int64 if ints else np.float32), name)
        self.inits.append(t)
        return name

    def node(self, op, inputs, shape, n_out=1, **attrs):
        outs = [self.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.fresh(op), **attrs))
        for o in outs:
            self.shapes[o] = shape
        return outs[0] if n_out == 1 else outs

    # --- layers -------------------------------------------------------------------------------
    def conv(self, x, cout, k, s=1, p=None, g=1, d=1, bias=False):
        c, h, w = self.shapes[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (s, s) if isinstance(s, int) else s
        if p is None:
            p = ((kh - 1) // 2 * d, (kw - 1) // 2 * d)
        ph, pw = (p, p) if isinstance(p, int) else p
        fan_in = c // g * kh * kw
        wt = self.rng.standard_normal((cout, c // g, kh, kw)) * np.sqrt(2.0 / fan_in)
        ins = [x, self.init("w", wt)]
        if bias:
            ins.append(self.init("b", self.rng.standard_normal(cout) * 0.1))
        ho = (h + 2 * ph - d * (kh - 1) - 1) // sh + 1
        wo = (w + 2 * pw - d * (kw - 1) - 1) // sw + 1
        return self.node("Conv", ins, (cout, ho, wo), kernel_shape=[kh, kw], strides=[sh, sw],
                         pads=[ph, pw, ph, pw], group=g, dilations=[d, d])

    def bn(self, x):
        c = self.shapes[x][0]
        r = self.rng
        ins = [x, self.init("gamma", r.uniform(0.5, 1.5, c)), self.init("beta", r.normal(0, 0.1, c)),
               self.init("mean", r.normal(0, 0.1, c)), self.init("var", r.uniform(0.5, 1.5, c))]
        return self.node("BatchNormalization", ins, self.shapes[x], epsilon=1e-5)

    def relu(self, x):
        return self.node("Relu", [x], self.shapes[x])

    def relu6(self, x):
        lo, hi = self.init("min", np.float32(0.0)), self.init("max", np.float32(6.0))
        return self.node("Clip", [x, lo, hi], self.shapes[x])

    def leaky(self, x, alpha=0.1):
        return self.node("LeakyRelu", [x], self.shapes[x], alpha=alpha)

    def silu(self, x):
        s = self.node("Sigmoid", [x], self.shapes[x])
        return self.node("Mul", [x, s], self.shapes[x])

    def cbr(self, x, cout, k, s=1, p=None, g=1, act="relu"):
        y = self.bn(self.conv(x, cout, k, s, p, g))
        return {"relu": self.relu, "relu6": self.relu6, "silu": self.silu, "leaky": self.leaky,
                "none": lambda v: v}[act](y)

    def pool(self, x, kind, k, s, p=0, ceil=False, include_pad=False):
        c, h, w = self.shapes[x]

        def out(n):
            v = (n + 2 * p - k) / s + 1
            o = int(np.ceil(v - 1e-9)) if ceil else int(np.floor(v))
            if ceil and (o - 1) * s >= n + p:
                o -= 1
            return o
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
        if ceil:
            attrs["ceil_mode"] = 1
        if kind == "AveragePool" and include_pad:
            attrs["count_include_pad"] = 1
        return self.node(kind, [x], (c, out(h), out(w)), **attrs)

    def gap(self, x):
        return self.node("GlobalAveragePool", [x], (self.shapes[x][0], 1, 1))

    def add(self, a, b):
        return self.node("Add", [a, b], self.shapes[a])

    def concat(self, xs):
        c = sum(self.shapes[x][0] for x in xs)
        _, h, w = self.shapes[xs[0]]
        return self.node("Concat", xs, (c, h, w), axis=1)

    def upsample(self, x, u=2):
        c, h, w = self.shapes[x]
        roi, scales = self.init("roi", np.zeros(0)), self.init("scales", [1, 1, u, u])
        return self.node("Resize", [x, roi, scales], (c, h * u, w * u), mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def split(self, x, sizes):
        c, h, w = self.shapes[x]
        outs = self.node("Split", [x, self.init("split", sizes, ints=True)], None,
                         n_out=len(sizes), axis=1)
        for o, s in zip(outs, sizes):
            self.shapes[o] = (s, h, w)
        return outs

    def flatten(self, x):
        return self.node("Flatten", [x], (int(np.prod(self.shapes[x])),), axis=1)

    def fc(self, x, fout, trans=True):
        fin = self.shapes[x][0]
        wt = self.rng.standard_normal((fout, fin)) * np.sqrt(1.0 / fin)
        if trans:
            return self.node("Gemm", [x, self.init("fc_w", wt), self.init("fc_b", self.rng.normal(0, 0.1, fout))],
                             (fout,), transB=1)
        return self.node("MatMul", [x, self.init("fc_w", wt.T)], (fout,))

    def softmax(self, x):
        return self.node("Softmax", [x], self.shapes[x], axis=-1)

    def model(self, outputs):
        inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, list(self.input_shape))
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [self.batch, *self.shapes[o]])
                for o in outputs]
        g = helper.make_graph(self.nodes, self.name, [inp], outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tandem gen_models.py")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


# --- architectures --------------------------------------------------------------------------
def resnet(depth, seed=1):
    n = Net(f"resnet{depth}", (1, 3, 224, 224), seed)
    layers = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}[depth]
    bottleneck = depth >= 50
    x = n.cbr("input", 64, 7, 2, 3)
    x = n.pool(x, "MaxPool", 3, 2, 1)
    cin = 64
    for stage, blocks in enumerate(layers):
        width = 64 * 2 ** stage
        cout = width * 4 if bottleneck else width
        for b in range(blocks):
            s = 2 if stage > 0 and b == 0 else 1
            if bottleneck:
                y = n.cbr(x, width, 1)
                y = n.cbr(y, width, 3, s)
                y = n.bn(n.conv(y, cout, 1))
            else:
                y = n.cbr(x, width, 3, s)
                y = n.bn(n.conv(y, cout, 3))
            sc = x if (s == 1 and cin == cout) else n.bn(n.conv(x, cout, 1, s, 0))
            x = n.relu(n.add(y, sc))
            cin = cout
    x = n.flatten(n.gap(x))
    return n.model([n.fc(x, 1000)])


def mobilenet_v2(seed=2):
    n = Net("mobilenet_v2", (1, 3, 224, 224), seed)
    x = n.cbr("input", 32, 3, 2, act="relu6")
    cin = 32
    for t, c, reps, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(reps):
            stride = s if i == 0 else 1
            hid = cin * t
            y = x if t == 1 else n.cbr(x, hid, 1, act="relu6")
            y = n.cbr(y, hid, 3, stride, g=hid, act="relu6")
            y = n.bn(n.conv(y, c, 1))
            x = n.add(y, x) if stride == 1 and cin == c else y
            cin = c
    x = n.cbr(x, 1280, 1, act="relu6")
    x = n.flatten(n.gap(x))
    return n.model([n.fc(x, 1000)])


def vgg16(seed=3):
    n = Net("vgg16", (1, 3, 224, 224), seed)
    x = "input"
    for c, reps in [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]:
        for _ in range(reps):
            x = n.relu(n.conv(x, c, 3, bias=True))
        x = n.pool(x, "MaxPool", 2, 2)
    x = n.flatten(x)
    x = n.relu(n.fc(x, 4096))
    x = n.relu(n.fc(x, 4096))
    return n.model([n.softmax(n.fc(x, 1000))])


def alexnet(seed=4):
    n = Net("alexnet", (1, 3, 224, 224), seed)
    x = n.relu(n.conv("input", 64, 11, 4, 2, bias=True))
    x = n.pool(x, "MaxPool", 3, 2)
    x = n.relu(n.conv(x, 192, 5, 1, 2, bias=True))
    x = n.pool(x, "MaxPool", 3, 2)
    x = n.relu(n.conv(x, 384, 3, bias=True))
    x = n.relu(n.conv(x, 256, 3, bias=True))
    x = n.relu(n.conv(x, 256, 3, bias=True))
    x = n.pool(x, "MaxPool", 3, 2)
    x = n.flatten(x)
    x = n.relu(n.fc(x, 4096))
    x = n.relu(n.fc(x, 4096, trans=False))
    return n.model([n.fc(x, 1000)])


def inception_v3(seed=5):
    n = Net("inception_v3", (1, 3, 299, 299), seed)
    c = n.cbr
    x = c("input", 32, 3, 2, 0)
    x = c(x, 32, 3, 1, 0)
    x = c(x, 64, 3)
    x = n.pool(x, "MaxPool", 3, 2)
    x = c(x, 80, 1)
    x = c(x, 192, 3, 1, 0)
    x = n.pool(x, "MaxPool", 3, 2)

    def block_a(x, pool_c):
        b1 = c(x, 64, 1)
        b5 = c(c(x, 48, 1), 64, 5)
        b3 = c(c(c(x, 64, 1), 96, 3), 96, 3)
        bp = c(n.pool(x, "AveragePool", 3, 1, 1, include_pad=True), pool_c, 1)
        return n.concat([b1, b5, b3, bp])

    def block_b(x):  # grid reduction 35 -> 17
        b3 = c(x, 384, 3, 2, 0)
        bd = c(c(c(x, 64, 1), 96, 3), 96, 3, 2, 0)
        return n.concat([b3, bd, n.pool(x, "MaxPool", 3, 2)])

    def block_c(x, c7):  # factorised 7x7: 1x7 and 7x1
        b1 = c(x, 192, 1)
        b7 = c(c(c(x, c7, 1), c7, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
        bd = c(x, c7, 1)
        for k, co in [((7, 1), c7), ((1, 7), c7), ((7, 1), c7), ((1, 7), 192)]:
            bd = c(bd, co, k, 1, (k[0] // 2, k[1] // 2))
        bp = c(n.pool(x, "AveragePool", 3, 1, 1, include_pad=True), 192, 1)
        return n.concat([b1, b7, bd, bp])

    def block_d(x):  # 17 -> 8
        b3 = c(c(x, 192, 1), 320, 3, 2, 0)
        b7 = c(c(c(c(x, 192, 1), 192, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0)), 192, 3, 2, 0)
        return n.concat([b3, b7, n.pool(x, "MaxPool", 3, 2)])

    def block_e(x):
        b1 = c(x, 320, 1)
        b3 = c(x, 384, 1)
        b3 = n.concat([c(b3, 384, (1, 3), 1, (0, 1)), c(b3, 384, (3, 1), 1, (1, 0))])
        bd = c(c(x, 448, 1), 384, 3)
        bd = n.concat([c(bd, 384, (1, 3), 1, (0, 1)), c(bd, 384, (3, 1), 1, (1, 0))])
        bp = c(n.pool(x, "AveragePool", 3, 1, 1, include_pad=True), 192, 1)
        return n.concat([b1, b3, bd, bp])

    x = block_a(x, 32)
    x = block_a(x, 64)
    x = block_a(x, 64)
    x = block_b(x)
    for c7 in (128, 160, 160, 192):
        x = block_c(x, c7)
    x = block_d(x)
    x = block_e(x)
    x = block_e(x)
    x = n.flatten(n.gap(x))
    return n.model([n.fc(x, 1000)])


def yolov5s(seed=6, size=640):
    n = Net("yolov5s", (1, 3, size, size), seed)

    def conv(x, co, k=1, s=1):
        return n.cbr(x, co, k, s, act="silu")

    def c3(x, co, reps, shortcut=True):
        h = co // 2
        a = conv(x, h)
        for _ in range(reps):
            y = conv(conv(a, h, 1), h, 3)
            a = n.add(a, y) if shortcut else y
        return conv(n.concat([a, conv(x, h)]), co)

    def sppf(x, co):
        h = n.shapes[x][0] // 2
        y = conv(x, h)
        p1 = n.pool(y, "MaxPool", 5, 1, 2)
        p2 = n.pool(p1, "MaxPool", 5, 1, 2)
        p3 = n.pool(p2, "MaxPool", 5, 1, 2)
        return conv(n.concat([y, p1, p2, p3]), co)

    x = conv("input", 32, 6, 2)  # the v6.0 stem: a 6x6 stride-2 conv
    x = conv(x, 64, 3, 2)
    x = c3(x, 64, 1)
    x = conv(x, 128, 3, 2)
    p3 = c3(x, 128, 2)
    x = conv(p3, 256, 3, 2)
    p4 = c3(x, 256, 3)
    x = conv(p4, 512, 3, 2)
    x = c3(x, 512, 1)
    x = sppf(x, 512)
    h10 = conv(x, 256)
    x = c3(n.concat([n.upsample(h10), p4]), 256, 1, False)
    h14 = conv(x, 128)
    o3 = c3(n.concat([n.upsample(h14), p3]), 128, 1, False)
    o4 = c3(n.concat([conv(o3, 128, 3, 2), h14]), 256, 1, False)
    o5 = c3(n.concat([conv(o4, 256, 3, 2), h10]), 512, 1, False)
    heads = [n.node("Sigmoid", [n.conv(o, 255, 1, bias=True)], None) for o in (o3, o4, o5)]
    for h, o in zip(heads, (o3, o4, o5)):
        n.shapes[h] = (255, *n.shapes[o][1:])
    return n.model(heads)


def yolov2_tiny(seed=7):
    n = Net("yolov2_tiny", (1, 3, 416, 416), seed)
    x = "input"
    for i, co in enumerate([16, 32, 64, 128, 256, 512]):
        x = n.cbr(x, co, 3, act="leaky")
        if i < 5:
            x = n.pool(x, "MaxPool", 2, 2, 0)
        else:  # darknet's size-2 stride-1 pool keeps 13x13: one padding row/column at the end
            x = n.node("MaxPool", [x], (co, 13, 13), kernel_shape=[2, 2], strides=[1, 1],
                       pads=[0, 0, 1, 1])
    x = n.cbr(x, 1024, 3, act="leaky")
    x = n.cbr(x, 512, 3, act="leaky")
    return n.model([n.conv(x, 125, 1, bias=True)])


def yolov2(seed=8):
    n = Net("yolov2", (1, 3, 448, 448), seed)
    x = "input"
    blocks = [[(32, 3)], [(64, 3)], [(128, 3), (64, 1), (128, 3)], [(256, 3), (128, 1), (256, 3)],
              [(512, 3), (256, 1), (512, 3), (256, 1), (512, 3)],
              [(1024, 3), (512, 1), (1024, 3), (512, 1), (1024, 3)]]
    for i, block in enumerate(blocks):
        for co, k in block:
            x = n.cbr(x, co, k, act="leaky")
        if i == 4:
            fine = x  # 28x28x512: the passthrough's source
        if i < 5:
            x = n.pool(x, "MaxPool", 2, 2, 0)
    x = n.cbr(n.cbr(x, 1024, 3, act="leaky"), 1024, 3, act="leaky")
    p = n.cbr(fine, 64, 1, act="leaky")
    # reorg (space-to-depth, stride 2) as a conv: output channel 4c + 2i + j copies input channel c
    # at offset (i, j) of each 2x2 block
    c = n.shapes[p][0]
    w = np.zeros((4 * c, c, 2, 2), np.float32)
    for ch in range(c):
        for i in range(2):
            for j in range(2):
                w[4 * ch + 2 * i + j, ch, i, j] = 1.0
    h = n.shapes[p][1] // 2
    r = n.node("Conv", [p, n.init("reorg_w", w)], (4 * c, h, h), kernel_shape=[2, 2],
               strides=[2, 2], pads=[0, 0, 0, 0])
    x = n.cbr(n.concat([r, x]), 1024, 3, act="leaky")
    return n.model([n.conv(x, 125, 1, bias=True)])


# --- tiny graphs (committed with references) --------------------------------------------------
def tiny_cnn(seed=11):
    """Every op the importer supports, on a 1x3x24x20 image."""
    n = Net("tiny_cnn", (1, 3, 24, 20), seed)
    x = n.cbr("input", 8, 3, 1)                       # conv+BN+relu
    x = n.pool(x, "MaxPool", 3, 2, 0, ceil=True)       # ceil mode
    a = n.conv(x, 8, (1, 3), 1, (0, 1), bias=True)     # non-square kernel
    b = n.relu6(n.bn(n.conv(x, 8, 3, 1, 2, g=8, d=2)))  # depthwise, dilated
    x = n.relu(n.add(a, b))
    y = n.leaky(n.conv(x, 12, 3, 2, 1, g=2, bias=True))   # grouped, strided
    u = n.upsample(y)                                  # nearest x2
    x = n.concat([u, x])
    s1, s2 = n.split(x, [8, 12])
    s1 = n.silu(s1)
    x = n.concat([s2, s1])
    x = n.pool(x, "AveragePool", 3, 1, 1, include_pad=False)
    m = n.node("Sigmoid", [n.conv(x, 6, 1)], (6, *n.shapes[x][1:]))
    x = n.pool(m, "AveragePool", 2, 2, 0)
    f = n.flatten(x)
    z = n.relu(n.fc(f, 16))
    return n.model([n.softmax(n.fc(z, 10, trans=False)), m])


def tiny_resnet(seed=12):
    n = Net("tiny_resnet", (2, 3, 16, 16), seed)
    x = n.cbr("input", 8, 3)
    for co, s in [(8, 1), (16, 2)]:
        y = n.cbr(x, co, 3, s)
        y = n.bn(n.conv(y, co, 3))
        sc = x if s == 1 else n.bn(n.conv(x, co, 1, s, 0))
        x = n.relu(n.add(y, sc))
    f = n.flatten(n.gap(x))
    return n.model([n.fc(f, 5), x])


MODELS = {
    "resnet18": lambda: resnet(18), "resnet34": lambda: resnet(34), "resnet50": lambda: resnet(50),
    "mobilenet_v2": mobilenet_v2, "vgg16": vgg16, "alexnet": alexnet,
    "inception_v3": inception_v3, "yolov5s": yolov5s, "yolov2": yolov2,
    "yolov2_tiny": yolov2_tiny,
    "tiny_cnn": tiny_cnn, "tiny_resnet": tiny_resnet,
}
GROUPS = {
    "tiny": ["tiny_cnn", "tiny_resnet"],
    "bench": ["resnet50", "mobilenet_v2", "inception_v3", "yolov5s"],
    "all": list(MODELS),
}


def reference(path, name, out_dir, seed=0):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(seed).standard_normal(inp.shape).astype(np.float32)
    outs = sess.run(None, {inp.name: x})
    x.tofile(os.path.join(out_dir, f"{name}.input.bin"))
    np.concatenate([o.astype(np.float32).ravel() for o in outs]).tofile(
        os.path.join(out_dir, f"{name}.output.bin"))
    meta = {"model": f"{name}.onnx", "input_shape": list(inp.shape),
            "output_shapes": [list(o.shape) for o in outs],
            "reference": f"onnxruntime {ort.__version__}"}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="all")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--skip-existing", action="store_true",
                    help="keep models (and references) already written in --out")
    a = ap.parse_args()
    names = []
    for part in a.models.split(","):
        names += GROUPS.get(part, [part])
    os.makedirs(a.out, exist_ok=True)
    for name in names:
        if name not in MODELS:
            sys.exit(f"gen_models.py: unknown model '{name}' (known: {', '.join(MODELS)})")
        path = os.path.join(a.out, f"{name}.onnx")
        done = os.path.exists(path) and (not a.reference or
                                         os.path.exists(os.path.join(a.out, f"{name}.json")))
        if a.skip_existing and done:
            continue
        onnx.save(MODELS[name](), path)
        msg = f"{path}: {os.path.getsize(path) / 1e6:.1f} MB"
        if a.reference:
            reference(path, name, a.out)
            msg += ", reference written"
        print(msg, file=sys.stderr)


if __name__ == "__main__":
    main()
