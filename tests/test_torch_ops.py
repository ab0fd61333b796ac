"""The `aclnn::` custom operators (aclnn_gpu/torch/ops.py): torch.library.opcheck of every one (schema,
fake tensor, autograd registration, AOT dispatch with dynamic shapes) on cpu tensors, the fake
implementations' shapes and dtypes against the real results, torch.compile(fullgraph=True) of the
attention step and of the ConvTbc + CTC model against eager, and torch.export holding them."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from support import use_device  # noqa: E402

import aclnn_gpu.torch as AT  # noqa: E402
from aclnn_gpu.torch import ops as torch_ops  # noqa: E402

aclnn = torch.ops.aclnn


@pytest.fixture(autouse=True)
def cpu_device():
    use_device("cpu")


def _gen():
    return torch.Generator().manual_seed(20)


def ctc_args(requires_grad=True, dtype=torch.float64):
    g = _gen()
    T, N, C = 12, 3, 5
    lp = torch.randn(T, N, C, dtype=dtype, generator=g).log_softmax(-1).requires_grad_(requires_grad)
    targets = torch.randint(1, C, (N, 4), generator=g)
    return lp, targets, [12, 9, 7], [4, 2, 0], 0, False


def ce_args(reduction, weighted, requires_grad=True):
    g = _gen()
    x = torch.randn(6, 4, dtype=torch.float64, generator=g).requires_grad_(requires_grad)
    t = torch.tensor([0, 3, -100, 1, 2, 2])
    w = torch.tensor([0.5, 1.0, 2.0, 0.25]) if weighted else None
    return x, t, w, reduction, -100, 0.1


def kl_args(reduction, requires_grad=True):
    g = _gen()
    x = torch.randn(3, 1, 5, dtype=torch.float64, generator=g).log_softmax(-1).requires_grad_(requires_grad)
    t = torch.rand(3, 2, 5, dtype=torch.float64, generator=g)
    return x, t, reduction, False


def conv_args(requires_grad=True, pad=1):
    g = _gen()
    return (torch.randn(7, 2, 3, generator=g).requires_grad_(requires_grad),
            torch.randn(3, 3, 4, generator=g).requires_grad_(requires_grad),
            torch.randn(4, generator=g).requires_grad_(requires_grad), pad, 0)


def softmax_args(requires_grad=True, masked=True):
    g = _gen()
    x = torch.randn(2, 2, 4, 6, generator=g).requires_grad_(requires_grad)
    mask = (torch.rand(2, 1, 4, 6, generator=g) < 0.3) if masked else None
    return x, mask, 0.5, not masked


def _forward_cases():
    return [
        ("ctc_loss", ctc_args()),
        *[("cross_entropy_loss", ce_args(r, w)) for r in ("none", "mean", "sum") for w in (False, True)],
        *[("cross_entropy_loss_zloss", ce_args(r, w) + (0.05,)) for r in ("none", "mean") for w in (False, True)],
        *[("nll_loss", ce_args(r, True)[:5]) for r in ("none", "mean")],
        *[("kl_div", kl_args(r)) for r in ("none", "batchmean")],
        ("conv_tbc", conv_args()),
        ("scaled_masked_softmax", softmax_args()),
        ("scaled_masked_softmax", softmax_args(masked=False)),
    ]


def _backward_cases():
    lp, tg, il, tl, blank, zi = ctc_args(requires_grad=False)
    nll, log_alpha = aclnn.ctc_loss(lp, tg, il, tl, blank, zi)
    x, t, w, _, ii, ls = ce_args("mean", True, requires_grad=False)
    _, log_prob = aclnn.cross_entropy_loss(x, t, w, "mean", ii, ls)
    _, _, lse = aclnn.cross_entropy_loss_zloss(x, t, w, "mean", ii, ls, 0.05)
    kx, kt, _, lt = kl_args("sum", requires_grad=False)
    cx, cw, cb, pad, cmt = conv_args(requires_grad=False)
    sx, mask, scale, causal = softmax_args(requires_grad=False)
    y = aclnn.scaled_masked_softmax(sx, mask, scale, causal)
    return [
        ("ctc_loss_backward", (torch.rand(3, dtype=torch.float64), lp, tg, il, tl, nll, log_alpha, blank, True)),
        ("cross_entropy_loss_grad", (torch.tensor(0.7, dtype=torch.float64), log_prob, t, w, "mean", ii, ls)),
        ("cross_entropy_loss_grad", (torch.tensor(0.7, dtype=torch.float64), log_prob, t, w, "mean", ii, ls, lse, 0.05)),
        ("kl_div_backward", (torch.tensor(1.5, dtype=torch.float64), kx, kt, "sum", lt)),
        ("conv_tbc_backward", (torch.randn(7, 2, 4), cx, cw, cb, pad, cmt)),
        ("scaled_masked_softmax_backward", (torch.randn(sx.shape), y, mask, scale, causal)),
    ]


@pytest.mark.parametrize("case", range(len(_forward_cases())))
def test_opcheck_forward_operators(case):
    """Schema, fake tensor, autograd registration and AOT dispatch (dynamic shapes), gradients included."""
    name, args = _forward_cases()[case]
    torch.library.opcheck(getattr(aclnn, name).default, args)


@pytest.mark.parametrize("case", range(len(_backward_cases())))
def test_opcheck_backward_operators(case):
    name, args = _backward_cases()[case]
    torch.library.opcheck(getattr(aclnn, name).default, args)


def test_every_operator_is_checked():
    checked = {name for name, _ in _forward_cases() + _backward_cases()}
    assert checked == set(torch_ops.OPERATORS)
    for name in torch_ops.OPERATORS:
        assert str(getattr(aclnn, name).default._schema).startswith(f"aclnn::{name}(")


def test_the_registered_operators_are_the_families_definitions():
    """The operators are exactly the records of the families `ops/registry.py` lists in TORCH (each in
    `ops/<family>/torch_ops.py`, no name twice), and each record's functional call exists."""
    import importlib

    from aclnn_gpu import functional
    from aclnn_gpu.ops import registry
    names = []
    for family in registry.TORCH:
        for record in importlib.import_module(f"aclnn_gpu.ops.{family}.torch_ops").OPERATORS:
            names.append(record.name)
            assert record.functional is None or callable(getattr(functional, record.functional)), record.name
    assert len(names) == len(set(names)) and set(names) == set(torch_ops.OPERATORS)


def test_the_public_functions_are_the_families_functions():
    """aclnn_gpu.torch publishes exactly the PUBLIC objects of each TORCH family's
    `ops/<family>/torch_functions.py` (functions first, then the former autograd.Function classes), as
    real attributes, and its docstring carries each family's section."""
    import importlib
    import inspect

    from aclnn_gpu.ops import registry
    published = [o for family in registry.TORCH
                 for o in importlib.import_module(f"aclnn_gpu.ops.{family}.torch_functions").PUBLIC]
    assert sorted(AT.__all__) == sorted(o.__name__ for o in published)
    assert [inspect.isclass(getattr(AT, n)) for n in AT.__all__] == sorted(inspect.isclass(o) for o in published)
    for o in published:
        assert vars(AT)[o.__name__] is o and o.__doc__
        assert f"aclnn_gpu/ops/{o.__module__.split('.')[-2]}/torch_functions.py" in AT.__doc__


def test_ctc_mean_asks_the_pytorch_layer_whether_the_call_captures():
    """ctc_loss's "mean" builds its length tensor on the device while PyTorch's stream captures a CUDA
    graph: the family's module (layer 11) asks aclnn_gpu.torch.stream's capturing_for, handed to
    ops/torch_rules.py when the operators are registered; either way of building it gives PyTorch's loss."""
    from aclnn_gpu.ops import torch_rules
    from aclnn_gpu.torch import stream as torch_stream
    assert torch_rules._capture_check is torch_stream.capturing_for
    lp, targets, il, tl, _, _ = ctc_args(requires_grad=False)
    expected = TF.ctc_loss(lp, targets, il, tl, reduction="mean")
    asked = []
    try:
        for answer in (False, True):
            torch_rules.set_capture_check(lambda t, answer=answer: asked.append(t.shape) or answer)
            torch.testing.assert_close(AT.ctc_loss(lp, targets, il, tl, reduction="mean"), expected)
    finally:
        torch_rules.set_capture_check(torch_stream.capturing_for)
    assert asked == [torch.Size([3]), torch.Size([3])]


@pytest.mark.parametrize("case", range(len(_forward_cases()) + len(_backward_cases())))
def test_fake_gives_the_real_shapes_and_dtypes(case):
    """Under FakeTensorMode each operator gives exactly the real results' shapes, strides and dtypes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    name, args = (_forward_cases() + _backward_cases())[case]
    real = getattr(aclnn, name)(*args)
    mode = FakeTensorMode()
    fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode:
        fake = getattr(aclnn, name)(*fake_args)
    real, fake = (real, fake) if isinstance(real, tuple) else ((real,), (fake,))
    assert [(tuple(r.shape), r.stride(), r.dtype) for r in real] == \
        [(tuple(f.shape), f.stride(), f.dtype) for f in fake]


def test_ctc_log_alpha_shape_with_symbolic_lengths():
    """The fake CTC gives log_alpha (N, T, 2*max(target_lengths)+1) with the lengths symbolic too."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch._subclasses.fake_tensor import FakeTensorMode
    env = ShapeEnv()
    lengths = [env.create_unbacked_symint() for _ in range(3)]
    with FakeTensorMode(shape_env=env):
        lp = torch.empty(12, 3, 5, dtype=torch.float64)
        _, log_alpha = aclnn.ctc_loss(lp, torch.zeros(3, 4, dtype=torch.int64), [12, 9, 7], lengths, 0, False)
    assert str(log_alpha.shape[2]) == str(2 * torch.sym_max(torch.sym_max(torch.sym_max(0, lengths[0]), lengths[1]),
                                                             lengths[2]) + 1)


def test_cross_entropy_log_prob_output_is_differentiable():
    """log_prob (log_softmax(input)) has log_softmax's gradient when it is used, besides the loss's."""
    x = torch.randn(5, 4, dtype=torch.float64, generator=_gen(), requires_grad=True)
    t = torch.tensor([0, 3, 1, 1, 2])
    loss, log_prob = aclnn.cross_entropy_loss(x, t, None, "sum", -100, 0.0)
    w = torch.randn(5, 4, dtype=torch.float64, generator=_gen())
    (ours,) = torch.autograd.grad(loss + (log_prob * w).sum(), [x])
    ref = x.detach().clone().requires_grad_(True)
    (theirs,) = torch.autograd.grad(TF.cross_entropy(ref, t, reduction="sum") + (ref.log_softmax(-1) * w).sum(), [ref])
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------- torch.compile and torch.export
B, T, V, D = 4, 8, 11, 16


def attention_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: (torch.randn(*shape, generator=g) / math.sqrt(shape[-2] if len(shape) > 1 else 1)
                        ).requires_grad_(True)
    return {"emb": r(V, D), "wc": r(3, D, D), "bc": torch.zeros(D, requires_grad=True), "wq": r(D, D),
            "wk": r(D, D), "wv": r(D, D), "out": r(D, V)}


def attention_batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, V, (B, T + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:].clone()
    y[:, :2] = -100
    key_padding = torch.zeros(B, 1, T, T, dtype=torch.bool)
    key_padding[0, ..., -2:] = True
    return x, y, key_padding


def attention_step(p, x, y, key_padding, ops=AT):
    """The attention training step's loss: ConvTbc, the scaled masked softmax and cross-entropy."""
    h = p["emb"][x.t()]                                               # (T, B, D)
    h = h + torch.relu(ops.conv_tbc(h, p["wc"], p["bc"], 2)[:T])
    hb = h.transpose(0, 1)
    scores = ((hb @ p["wq"]) @ (hb @ p["wk"]).transpose(1, 2)).unsqueeze(1)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    attn = ops.scaled_masked_softmax(scores, key_padding | causal, 1.0 / math.sqrt(D))
    hb = hb + attn.squeeze(1) @ (hb @ p["wv"])
    return ops.cross_entropy((hb @ p["out"]).reshape(B * T, V), y.reshape(B * T), label_smoothing=0.05)


def ctc_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"w1": (torch.randn(5, 6, 8, generator=g) * 0.2).requires_grad_(True),
            "b1": torch.zeros(8, requires_grad=True),
            "wo": (torch.randn(8, 5, generator=g) * 0.3).requires_grad_(True)}


def ctc_batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(20, 3, 6, generator=g)
    targets = torch.randint(1, 5, (3, 4), generator=g)
    return feats, targets, [20, 17, 12], [4, 2, 3]


def ctc_step(p, feats, targets, input_lengths, target_lengths, ops=AT):
    """The ConvTbc + CTC model's loss."""
    h = torch.tanh(ops.conv_tbc(feats, p["w1"], p["b1"], 2))
    return ops.ctc_loss((h @ p["wo"]).log_softmax(-1), targets, input_lengths, target_lengths)


def _grads(step, params, *batch):
    loss = step(params, *batch)
    return loss.detach(), torch.autograd.grad(loss, list(params.values()))


def _compiled_matches_eager(step, params, batch):
    import torch._dynamo
    torch._dynamo.reset()
    eager = _grads(step, params, *batch)
    compiled = torch.compile(step, fullgraph=True)        # raises on any graph break
    ours = _grads(compiled, params, *batch)
    torch.testing.assert_close(ours[0], eager[0], rtol=1e-5, atol=1e-6)
    for a, e in zip(ours[1], eager[1]):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
    return eager


def test_compile_fullgraph_attention_step():
    """The attention step (ConvTbc, scaled masked softmax, cross-entropy) compiles into one graph and gives
    the eager loss and gradients, which match PyTorch's own ops."""
    params, batch = attention_params(), attention_batch()
    eager = _compiled_matches_eager(attention_step, params, batch)

    class TorchOps:
        conv_tbc = staticmethod(lambda x, w, b, pad: torch.conv_tbc(x.contiguous(), w, b, pad))
        softmax = staticmethod(lambda s, m, scale: (s * scale).masked_fill(m, float("-inf")).softmax(-1))
        scaled_masked_softmax = softmax
        cross_entropy = staticmethod(TF.cross_entropy)
    theirs = _grads(lambda p, *b: attention_step(p, *b, ops=TorchOps), params, *batch)
    torch.testing.assert_close(eager[0], theirs[0], rtol=2e-5, atol=2e-6)


def test_compile_fullgraph_conv_tbc_ctc_model():
    """The ConvTbc + CTC model compiles into one graph (aot_eager: the same Dynamo and AOTAutograd
    tracing, without Inductor's code generation) and gives the eager loss and gradients."""
    import torch._dynamo
    torch._dynamo.reset()
    params, batch = ctc_params(), ctc_batch()
    eager = _grads(ctc_step, params, *batch)
    compiled = torch.compile(ctc_step, fullgraph=True, backend="aot_eager")
    ours = _grads(compiled, params, *batch)
    torch.testing.assert_close(ours[0], eager[0], rtol=1e-6, atol=1e-7)
    for a, e in zip(ours[1], eager[1]):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-7)
    theirs = _grads(lambda p, *b: ctc_step(p, *b, ops=TF), params, *batch)   # torch.conv_tbc + F.ctc_loss
    torch.testing.assert_close(eager[0], theirs[0], rtol=2e-5, atol=2e-6)


def test_export_holds_the_operators():
    """torch.export keeps every aclnn:: call as one node and the exported program gives eager's result."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v.detach()) for k, v in attention_params().items()})

        def forward(self, x, y, key_padding):
            return attention_step(self.p, x, y, key_padding)

    model, batch = Model(), attention_batch()
    program = torch.export.export(model, batch)
    called = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"aclnn.conv_tbc.default", "aclnn.scaled_masked_softmax.default",
            "aclnn.cross_entropy_loss.default"} <= called, called
    torch.testing.assert_close(program.module()(*batch), model(*batch), rtol=1e-6, atol=1e-7)


def test_compiled_ctc_takes_new_lengths_without_recompiling():
    """With dynamic=True the CTC lengths are symbolic: new lengths reuse the one graph (the fake gives
    log_alpha's symbolic width, the mean's divisor is built from the symbolic ints)."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    params, (feats, targets, _, _) = ctc_params(), ctc_batch()
    compiled = torch.compile(ctc_step, fullgraph=True, backend="aot_eager", dynamic=True)
    for il, tl in (([20, 17, 12], [4, 2, 3]), ([19, 20, 15], [3, 4, 1]), ([18, 16, 20], [2, 3, 4])):
        ours = _grads(compiled, params, feats, targets, il, tl)
        eager = _grads(ctc_step, params, feats, targets, il, tl)
        torch.testing.assert_close(ours[0], eager[0], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(ours[1][0], eager[1][0], rtol=1e-6, atol=1e-7)
    assert counters["stats"]["unique_graphs"] == 1
