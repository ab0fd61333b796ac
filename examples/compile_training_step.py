#!/usr/bin/env python3
"""A PyTorch training step made with aclnn_gpu.torch, run eager and under torch.compile(fullgraph=True),
side by side with the same step made of PyTorch's own ops: the time per step of each, and the largest
difference of the losses and gradients from PyTorch's.

Models (--model):
  attention  a tiny causal language model (batch x seq tokens): embedding -> causal ConvTBC (K=3) ->
             single-head self-attention with apex's scaled_masked_softmax (causal mask) -> linear ->
             cross-entropy; aclnn's ConvTbc, ScaledMaskedSoftmax and CrossEntropyLoss forward and
             backward against torch.conv_tbc, masked_fill + softmax and F.cross_entropy
  ctc        ConvTBC (K=5) -> tanh -> linear -> log_softmax -> CTC loss; aclnn's ConvTbc and CtcLoss
             against torch.conv_tbc and F.ctc_loss

Every run starts from the same weights and takes the same batches; each step is forward, backward and
an SGD update. On the cpu device the operators run through `functional` (the tensors lent zero-copy);
with the cuda device and --device cuda they run on PyTorch's current stream without waiting, so a step
is timed over many steps between two synchronizations (CUDA events around the loop).

    python examples/compile_training_step.py [--model attention|ctc] [--steps N] [--device cpu|cuda]
        [--backend inductor|aot_eager] [--batch B]
ACLNN_EXAMPLE_STEPS overrides the default number of timed steps.
On a loaded CPU machine, OMP_NUM_THREADS=1 gives steadier times: PyTorch's OpenMP workers otherwise
spin against each other and against the library's stream threads (on a 2-core machine at load 7,
PyTorch's own attention step took 640 ms with 2 threads and 25 ms with 1).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as TF

try:
    import aclnn_gpu.torch as AT
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import aclnn_gpu.torch as AT
import aclnn_gpu


class TorchOps:
    """PyTorch's own ops with the aclnn wrappers' signatures."""
    conv_tbc = staticmethod(lambda x, w, b, pad: torch.conv_tbc(x.contiguous(), w, b, pad))
    cross_entropy = staticmethod(TF.cross_entropy)
    ctc_loss = staticmethod(TF.ctc_loss)

    @staticmethod
    def scaled_masked_softmax(s, mask, scale):
        return (s * scale).masked_fill(mask, float("-inf")).softmax(-1)


# ---------------------------------------------------------------------------- the attention step
class Attention:
    name = "causal attention LM"

    def __init__(self, batch: int, device: torch.device):
        self.B, self.T, self.V, self.D = batch, 64, 128, 128
        self.device = device
        self.causal = torch.ones(self.T, self.T, dtype=torch.bool, device=device).triu(1).expand(batch, 1, self.T,
                                                                                                 self.T)

    def params(self) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        V, D = self.V, self.D
        r = lambda *s: torch.randn(*s, generator=g) / math.sqrt(s[-2] if len(s) > 1 else 1)  # noqa: E731
        p = {"emb": r(V, D), "wc": r(3, D, D), "bc": torch.zeros(D), "wq": r(D, D), "wk": r(D, D), "wv": r(D, D),
             "wo": r(D, D), "out": r(D, V)}
        return {k: v.to(self.device) for k, v in p.items()}

    def batch(self, step: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(1000 + step)
        tokens = torch.randint(1, self.V, (self.B, self.T + 1), generator=g)
        return tokens[:, :-1].to(self.device), tokens[:, 1:].to(self.device)

    def loss(self, p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, ops: Any) -> torch.Tensor:
        B, T, V, D = self.B, self.T, self.V, self.D
        h = p["emb"][x.t()]                                              # (T, B, D)
        h = h + torch.relu(ops.conv_tbc(h, p["wc"], p["bc"], 2)[:T])    # causal: output t sees t-2..t
        hb = h.transpose(0, 1)
        scores = ((hb @ p["wq"]) @ (hb @ p["wk"]).transpose(1, 2)).unsqueeze(1)   # (B, 1, T, T)
        attn = ops.scaled_masked_softmax(scores, self.causal, 1.0 / math.sqrt(D))
        hb = hb + (attn.squeeze(1) @ (hb @ p["wv"])) @ p["wo"]
        return ops.cross_entropy((hb @ p["out"]).reshape(B * T, V), y.reshape(B * T))

    def tokens(self) -> int:
        return self.B * self.T


# ---------------------------------------------------------------------------- the ConvTbc + CTC model
class Ctc:
    name = "ConvTbc + CTC acoustic model"

    def __init__(self, batch: int, device: torch.device):
        self.T, self.N, self.F, self.H, self.C, self.S = 64, batch, 32, 64, 16, 12
        self.device = device

    def params(self) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        p = {"w1": torch.randn(5, self.F, self.H, generator=g) / math.sqrt(5 * self.F), "b1": torch.zeros(self.H),
             "wo": torch.randn(self.H, self.C, generator=g) / math.sqrt(self.H)}
        return {k: v.to(self.device) for k, v in p.items()}

    def batch(self, step: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(1000 + step)
        feats = torch.randn(self.T, self.N, self.F, generator=g).to(self.device)
        targets = torch.randint(1, self.C, (self.N, self.S), generator=g).to(self.device)
        # fixed lengths per batch position: the compiled step sees the same lengths every step (lists
        # of Python ints; lengths that change make torch.compile recompile once with symbolic lengths)
        input_lengths = [self.T - (n % 8) for n in range(self.N)]
        target_lengths = [self.S - (n % 5) for n in range(self.N)]
        return feats, targets, input_lengths, target_lengths

    def loss(self, p: dict[str, torch.Tensor], feats: torch.Tensor, targets: torch.Tensor, il: list, tl: list,
             ops: Any) -> torch.Tensor:
        h = torch.tanh(ops.conv_tbc(feats, p["w1"], p["b1"], 2))
        return ops.ctc_loss((h @ p["wo"]).log_softmax(-1), targets, il, tl)

    def tokens(self) -> int:
        return self.T * self.N


# ---------------------------------------------------------------------------- training and timing
def run(model: Any, ops: Any, steps: int, warmup: int, compiled: bool, backend: str, lr: float = 0.05
        ) -> dict[str, Any]:
    """SGD from the model's initial weights for warmup + steps steps; losses of every step, the first
    step's gradients, the time of the first call (the compile) and the median time per timed step."""
    params = {k: v.clone().requires_grad_(True) for k, v in model.params().items()}
    names = list(params)

    def step(p: dict[str, torch.Tensor], *batch: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        loss = model.loss(p, *batch, ops=ops)
        return loss, torch.autograd.grad(loss, [p[n] for n in names])

    if compiled:
        torch._dynamo.reset()
        fn: Callable[..., Any] = torch.compile(lambda p, *b: model.loss(p, *b, ops=ops), fullgraph=True,
                                               backend=backend)

        def step(p: dict[str, torch.Tensor], *batch: Any) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:  # noqa: F811
            loss = fn(p, *batch)
            return loss, torch.autograd.grad(loss, [p[n] for n in names])

    cuda = model.device.type == "cuda"
    losses: list[torch.Tensor] = []
    first_grads: tuple[torch.Tensor, ...] = ()
    times: list[float] = []
    first_call = 0.0
    batches = [model.batch(i) for i in range(warmup + steps)]
    start_event = end_event = None
    for i, batch in enumerate(batches):
        if i == warmup:
            if cuda:
                torch.cuda.synchronize()
                start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start_event.record()
            loop_start = time.perf_counter()
        t0 = time.perf_counter()
        loss, grads = step(params, *batch)
        with torch.no_grad():
            for n, g in zip(names, grads):
                params[n] -= lr * g
        if not cuda:
            times.append(time.perf_counter() - t0)
        if i == 0:
            first_call = time.perf_counter() - t0
            first_grads = tuple(g.detach().clone() for g in grads)
        losses.append(loss.detach())
    if cuda:
        assert start_event is not None and end_event is not None
        end_event.record()
        torch.cuda.synchronize()
        per_step = start_event.elapsed_time(end_event) / 1e3 / steps
        host = (time.perf_counter() - loop_start) / steps
    else:
        per_step = statistics.median(times[warmup:])
        host = per_step
    return {"losses": torch.stack(losses).double().cpu(), "grads": [g.double().cpu() for g in first_grads],
            "first_call": first_call, "per_step": per_step, "host": host}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["attention", "ctc"], default="attention")
    parser.add_argument("--steps", type=int, default=int(os.environ.get("ACLNN_EXAMPLE_STEPS", "20")),
                        help="timed steps per run (default: ACLNN_EXAMPLE_STEPS, else %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the compile among them)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the tensors live")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest relative difference from PyTorch's ops allowed (exit 1 beyond)")
    args = parser.parse_args(argv)

    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's and the library's matmuls both in fp32
        torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)
    model = (Attention if args.model == "attention" else Ctc)(args.batch, device)
    steps, warmup = max(args.steps, 1), max(args.warmup, 1)
    print(f"{model.name}: {model.tokens()} tokens per step, {warmup} warm-up + {steps} timed steps of SGD, "
          f"tensors on {device}, aclnn_gpu device {aclnn_gpu.current_device_kind()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")
    runs = {
        "PyTorch ops, eager": run(model, TorchOps, steps, warmup, False, args.backend),
        "aclnn_gpu.torch, eager": run(model, AT, steps, warmup, False, args.backend),
        f"aclnn_gpu.torch, torch.compile(fullgraph=True, backend={args.backend})":
            run(model, AT, steps, warmup, True, args.backend),
    }
    reference = runs["PyTorch ops, eager"]
    worst = 0.0
    print("| run | first call (s) | step (ms) | tokens/s | max |loss - PyTorch's| | max |grad - PyTorch's| |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, result in runs.items():
        loss_diff = float((result["losses"] - reference["losses"]).abs().max())
        grad_diff = max(float((a - e).abs().max()) for a, e in zip(result["grads"], reference["grads"]))
        scale = max(1.0, float(reference["losses"].abs().max()))
        worst = max(worst, loss_diff / scale)
        print(f"| {label} | {result['first_call']:.2f} | {result['per_step'] * 1e3:.2f} | "
              f"{model.tokens() / result['per_step']:.0f} | {loss_diff:.2e} | {grad_diff:.2e} |")
    eager, compiled = runs["aclnn_gpu.torch, eager"], list(runs.values())[2]
    print(f"step time on {device}: eager {eager['per_step'] * 1e3:.2f} ms, "
          f"compiled {compiled['per_step'] * 1e3:.2f} ms "
          f"(PyTorch's ops eager {reference['per_step'] * 1e3:.2f} ms); largest relative loss difference from "
          f"PyTorch's ops {worst:.2e}")
    if worst > args.tolerance:
        print(f"FAILED: the losses differ from PyTorch's by more than {args.tolerance}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
