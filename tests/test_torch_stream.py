"""aclnn_gpu.torch on a GPU (aclnn_gpu/torch/stream.py): every operator enqueues on the PyTorch stream that
is current (a side stream included), returns without waiting, takes its results and workspace from
PyTorch's caching allocator on that stream, a result used on another stream is recorded there as
PyTorch requires, autograd's backward runs on the forward's stream, and a captured call replays.

Without a GPU these run on the emulated device with the stand-in of PyTorch's CUDA side
(tests/torch_gpu.py); with ACLNN_GPU_TEST_DEVICES=cuda on a machine with a GPU the same tests run on
PyTorch's CUDA streams and allocator, and the GPU-only ones (a captured training step) run too. The
values are checked against the same operators on the cpu device, which tests/test_torch_autograd.py
checks against PyTorch's own in float64."""
from __future__ import annotations

import contextlib
import ctypes
import gc
import math

import pytest

torch = pytest.importorskip("torch")

from support import DEVICE_KINDS, GPU_TOLERANCE_SCALE, use_device  # noqa: E402
from torch_gpu import Harness  # noqa: E402

import aclnn_gpu.torch as AT  # noqa: E402
from aclnn_gpu.torch import stream as torch_stream  # noqa: E402
from aclnn_gpu.device import cuda as cuda_device  # noqa: E402
from aclnn_gpu.device import cuda_context  # noqa: E402

aclnn = torch.ops.aclnn
GPU_KINDS = [k for k in DEVICE_KINDS if k in ("emulated", "cuda")]


@pytest.fixture(params=GPU_KINDS or [pytest.param(None, marks=pytest.mark.skip(
    reason="ACLNN_GPU_TEST_DEVICES names neither emulated nor cuda"))])
def gpu(request):
    kind = request.param
    if kind == "cuda" and not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU here (a CPU build of PyTorch, or no device)")
    if kind == "emulated":
        from aclnn_gpu.device.emulated import emulator_unavailable_reason
        if emulator_unavailable_reason():
            pytest.skip(emulator_unavailable_reason())
    use_device(kind)
    harness = Harness(kind)
    yield harness
    harness.close()


@pytest.fixture
def launches(monkeypatch):
    """(what, stream handle) of every upload, kernel launch and GEMM the cuda device's code enqueues
    (a frozen launch's steps all go through `run_frozen`, its tables through `upload_at`)."""
    seen: list[tuple[str, int]] = []
    for name in ("launch", "upload", "upload_at", "run_frozen", "gemm_strided_batched", "gemm_batched"):
        real = getattr(cuda_device.CudaKernelContext, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            seen.append((_name, int(self.stream.cupy.ptr)))
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(cuda_device.CudaKernelContext, name, spy)
    return seen


@pytest.fixture
def waits(monkeypatch, gpu):
    """Every host wait for device work: fakecupy's stream / event / device synchronize on the stand-in,
    PyTorch's on a GPU (where `Harness.blocked` also proves it: the blocked stream is still busy)."""
    seen: list[str] = []

    def counting(owner, name, static=False):
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            seen.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, staticmethod(spy) if static else spy)
    if gpu.standin is not None:
        fc = gpu.standin.fakecupy
        counting(fc.Stream, "synchronize")
        counting(fc.Event, "synchronize")
        counting(fc._Runtime, "deviceSynchronize", static=True)
    else:
        counting(torch.cuda, "synchronize")
        counting(torch.cuda.Stream, "synchronize")
        counting(torch.cuda.Event, "synchronize")
    return seen


@pytest.fixture
def library_memory(monkeypatch):
    """Allocations the library makes itself (its own pool): none on the torch path."""
    made: list[int] = []
    real = cuda_device.CudaDevice.malloc
    monkeypatch.setattr(cuda_device.CudaDevice, "malloc", lambda self, size: made.append(size) or real(self, size))
    return made


@contextlib.contextmanager
def on_cpu_device(kind):
    """The same calls through functional on the cpu device (the reference), then back to `kind`."""
    previous = torch_stream.set_backend(torch_stream.TorchCuda())
    use_device("cpu")
    try:
        yield
    finally:
        use_device(kind)
        torch_stream.set_backend(previous)


def _gen():
    return torch.Generator().manual_seed(5)


def _inputs(name):
    """CPU arguments of one operator (float64 where the operator takes DOUBLE); a backward operator's
    forward results come from the forward on the current (cpu) device."""
    g = _gen()
    if name.startswith("ctc_loss"):
        lp = torch.randn(12, 3, 5, dtype=torch.float64, generator=g).log_softmax(-1)
        targets = torch.randint(1, 5, (3, 4), generator=g)
        il, tl = [12, 9, 7], [4, 2, 3]
        if name == "ctc_loss":
            return lp, targets, il, tl, 0, False
        nll, log_alpha = aclnn.ctc_loss(lp, targets, il, tl, 0, False)
        return torch.rand(3, dtype=torch.float64, generator=g), lp, targets, il, tl, nll, log_alpha, 0, False
    if name.startswith("cross_entropy"):
        x = torch.randn(6, 4, dtype=torch.float64, generator=g)
        t, w = torch.tensor([0, 3, -100, 1, 2, 2]), torch.tensor([0.5, 1.0, 2.0, 0.25])
        if name == "cross_entropy_loss":
            return x, t, w, "mean", -100, 0.1
        _, log_prob = aclnn.cross_entropy_loss(x, t, w, "mean", -100, 0.1)
        return torch.tensor(0.7, dtype=torch.float64), log_prob, t, w, "mean", -100, 0.1
    if name.startswith("kl_div"):
        x = torch.randn(4, 5, dtype=torch.float64, generator=g).log_softmax(-1)
        t = torch.rand(4, 5, dtype=torch.float64, generator=g)
        return (x, t, "batchmean", False) if name == "kl_div" else \
            (torch.tensor(1.5, dtype=torch.float64), x, t, "batchmean", False)
    if name.startswith("conv_tbc"):
        x, w, b = torch.randn(9, 2, 3, generator=g), torch.randn(3, 3, 4, generator=g), torch.randn(4, generator=g)
        return (x, w, b, 1, 0) if name == "conv_tbc" else (torch.randn(9, 2, 4, generator=g), x, w, b, 1, 0)
    x = torch.randn(2, 2, 4, 8, generator=g)
    mask = torch.rand(2, 1, 4, 8, generator=g) < 0.3
    if name == "scaled_masked_softmax":
        return x, mask, 0.5, False
    y = aclnn.scaled_masked_softmax(x, mask, 0.5, False)
    return torch.randn(2, 2, 4, 8, generator=g), y, mask, 0.5, False


# the library's operators (nll_loss's forward is PyTorch's own op: it enqueues nothing of the library's)
STREAM_OPS = ["ctc_loss", "ctc_loss_backward", "cross_entropy_loss", "cross_entropy_loss_grad", "kl_div",
              "kl_div_backward", "conv_tbc", "conv_tbc_backward", "scaled_masked_softmax",
              "scaled_masked_softmax_backward"]


def _case(name, kind):
    with on_cpu_device(kind):
        args = _inputs(name)
        expected = getattr(aclnn, name)(*args)
    return args, expected if isinstance(expected, tuple) else (expected,)


def _to(args, device):
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


def _close(actual, expected):
    for a, e in zip(actual, expected):
        scale = (1e-9 if e.dtype == torch.float64 else 2e-5) * GPU_TOLERANCE_SCALE
        torch.testing.assert_close(a.cpu(), e, rtol=scale, atol=scale)


def _unwritten(tensor):
    """Still the stand-in allocator's NaN fill: nothing wrote it yet."""
    return bool(torch.isnan(tensor).all())


@pytest.mark.parametrize("name", STREAM_OPS)
def test_operator_enqueues_on_the_current_stream_and_returns_without_waiting(gpu, name, launches, waits,
                                                                            library_memory):
    """On a side stream: every upload, launch and GEMM goes to it, the call returns while the stream
    cannot yet run anything (no host wait: the results are not yet written), its results and workspace
    come from the allocator on that stream, and the values are the cpu device's once the stream ran."""
    args, expected = _case(name, gpu.kind)
    args = _to(args, gpu.device)
    side = gpu.new_stream()
    first, waited = len(gpu.allocations), len(waits)
    with gpu.stream(side), gpu.blocked(side) as held:
        out = getattr(aclnn, name)(*args)
        out = out if isinstance(out, tuple) else (out,)
        assert held() and len(waits) == waited, f"the call waited: {waits[waited:]}"
        if gpu.standin is not None:
            assert all(_unwritten(o) for o in out if o.numel()), "results written before the stream ran"
    gpu.synchronize(side)
    assert launches and {stream for _, stream in launches} == {gpu.handle(side)}, launches
    _close(out[:1] if name == "ctc_loss" else out, expected)      # (log_alpha: the backward's own state)
    # memory: the results and the workspace, from the allocator, on the side stream; none of the library's
    made = gpu.allocations[first:]
    assert {m[3] for m in made} == {gpu.handle(side)}
    results = {o.untyped_storage().data_ptr() for o in out}
    assert results <= {m[0] for m in made}, "a result that is not the allocator's"
    assert all(m[2] == torch.uint8 for m in made if m[0] not in results)   # the rest: the workspace
    if name == "kl_div":
        assert any(m[0] not in results for m in made), "kl_div's tiling workspace did not come from the allocator"
    assert not library_memory


def test_default_stream_too(gpu, launches):
    """With no stream made current, the calls go to PyTorch's current (default) stream."""
    args, expected = _case("scaled_masked_softmax", gpu.kind)
    out = aclnn.scaled_masked_softmax(*_to(args, gpu.device))
    gpu.synchronize(gpu.default())
    assert {s for _, s in launches} == {gpu.handle(gpu.default())}
    _close((out,), expected)


def test_result_used_on_another_stream(gpu, launches):
    """A result made on a side stream and read by a call on the default stream (after the default stream
    waits for the side one): that call records it on the default stream (Tensor.record_stream, PyTorch's
    rule for memory used on a stream other than its own), so the caller may drop it at once; each call
    runs on its own stream."""
    (x, mask, scale, causal), _ = _case("scaled_masked_softmax", gpu.kind)
    with on_cpu_device(gpu.kind):
        expected = aclnn.scaled_masked_softmax(aclnn.scaled_masked_softmax(x, mask, scale, causal), mask, scale, causal)
    x, mask = x.to(gpu.device), mask.to(gpu.device)
    side, default = gpu.new_stream(), gpu.default()
    with gpu.stream(side):
        y = aclnn.scaled_masked_softmax(x, mask, scale, causal)
    made_on_side = len(launches)
    gpu.wait_stream(default, side)
    with gpu.stream(default):
        z = aclnn.scaled_masked_softmax(y, mask, scale, causal)
    address = y.untyped_storage().data_ptr()
    del y
    assert (address, gpu.handle(default)) in gpu.recorded
    gpu.synchronize(default)
    assert made_on_side and {s for _, s in launches[:made_on_side]} == {gpu.handle(side)}
    assert len(launches) > made_on_side and {s for _, s in launches[made_on_side:]} == {gpu.handle(default)}
    _close((z,), (expected,))


def test_backward_runs_on_the_forward_stream(gpu, launches):
    """autograd's backward of an aclnn:: operator runs on the stream the forward ran on."""
    (x, t, reduction, log_target), _ = _case("kl_div", gpu.kind)
    with on_cpu_device(gpu.kind):
        leaf = x.clone().requires_grad_(True)
        (expected,) = torch.autograd.grad(AT.kl_div(leaf, t, reduction="sum"), [leaf])
    x = x.to(gpu.device).requires_grad_(True)
    side = gpu.new_stream()
    with gpu.stream(side):
        loss = AT.kl_div(x, t.to(gpu.device), reduction="sum")
        (grad,) = torch.autograd.grad(loss, [x])
    gpu.synchronize(side)
    assert len(launches) >= 2 and {s for _, s in launches} == {gpu.handle(side)}
    _close((grad,), (expected,))


def _latest_capture():
    """The TorchCapture of the latest call captured (its graph's hold is the newest)."""
    return list(torch_stream._holds.values())[-1].captures[-1]


@pytest.mark.parametrize("mode", ["global", "relaxed"])
def test_captured_call_replays(gpu, monkeypatch, mode):
    """A call made while PyTorch's stream captures a graph: its tables are uploaded from pinned buffers of
    its own (not the reused ring), from PyTorch's host allocator (CuPy's cudaHostAlloc would end a capture
    in PyTorch's default global mode), and its plan is kept, so each replay computes from the inputs'
    current values."""
    uploads = []
    real = cuda_context.captured_upload
    monkeypatch.setattr(cuda_context, "captured_upload", lambda *a: uploads.append(a) or real(*a))
    pinned, real_pinned = [], gpu.gpu.pinned
    monkeypatch.setattr(gpu.gpu, "pinned", lambda t: pinned.append(t.nbytes) or real_pinned(t))
    (lp, targets, il, tl, blank, zi), _ = _case("ctc_loss", gpu.kind)     # CTC uploads a per-sample table
    lp2 = lp.flip(2).contiguous()
    with on_cpu_device(gpu.kind):
        expected = [aclnn.ctc_loss(v, targets, il, tl, blank, zi)[0] for v in (lp, lp2)]
    static_lp, targets = lp.to(gpu.device), targets.to(gpu.device)
    side = gpu.new_stream()
    gc.collect()                        # earlier tests' graphs gone: what they kept is released here
    torch_stream.release_graphs()
    kept = torch_stream.held_captures()
    with gpu.stream(side):
        aclnn.ctc_loss(static_lp, targets, il, tl, blank, zi)                  # warm-up, outside the capture
        gpu.synchronize(side)
        if gpu.standin is not None:
            side.cupy.begin_capture()
            out, _ = aclnn.ctc_loss(static_lp, targets, il, tl, blank, zi)
            graph = side.cupy.end_capture()
            replay = lambda: graph.launch(side.cupy)   # noqa: E731
        else:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side, capture_error_mode=mode):
                out, _ = aclnn.ctc_loss(static_lp, targets, il, tl, blank, zi)
            replay = graph.replay
    assert uploads and torch_stream.held_captures() == kept + 1 and _latest_capture().plans
    assert len(pinned) == len(uploads) and all(a[4] is not None for a in uploads)   # each from PyTorch's pinned memory
    for value, want in zip((lp, lp2), expected):
        static_lp.copy_(value.to(gpu.device))
        with gpu.stream(side):
            replay()
        gpu.synchronize(side)
        _close((out,), (want,))


def test_what_a_capture_keeps_goes_with_its_graph(gpu):
    """The calls captured into one graph share one hold (one CUDA user object on the graph); it stays
    while the graph can be replayed, and goes once the graph is destroyed (fakecupy: the captured work
    and its launchable Graph both gone), at the next call or release_graphs()."""
    if gpu.standin is None:
        pytest.skip("drops the stand-in's graph; on a GPU the torch.cuda.graph tests capture and replay")
    (lp, targets, il, tl, blank, zi), _ = _case("ctc_loss", gpu.kind)
    with on_cpu_device(gpu.kind):
        expected = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)[0]
    side = gpu.new_stream()
    with gpu.stream(side):
        aclnn.ctc_loss(lp, targets, il, tl, blank, zi)                         # warm-up, outside the capture
        gpu.synchronize(side)
        gc.collect()
        graphs, kept = torch_stream.release_graphs(), torch_stream.held_captures()
        side.cupy.begin_capture()
        first, _ = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)
        second, _ = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)
        graph = side.cupy.end_capture()
        assert torch_stream.held_captures() == kept + 2 and torch_stream.release_graphs() == graphs + 1
        graph.launch(side.cupy)
        gpu.synchronize(side)
        gc.collect()
        assert torch_stream.release_graphs() == graphs + 1                     # the graph lives: kept
        _close((first, second), (expected, expected))
        del graph
        gc.collect()
        assert torch_stream.release_graphs() == graphs and torch_stream.held_captures() == kept


def test_graph_hold_reaches_cuda_bindings_with_its_signatures(monkeypatch):
    """On the cuda device the hold calls cuda-bindings itself (fakecupy stands in for it only on the
    emulated device): called for real here with the handles as the library passes them. Without a GPU
    (or on stream 0, which captures nothing) the query answers no active capture, and the call's capture
    is kept for the process; the user-object calls take the library's arguments and answer a cudaError_t."""
    cudart = pytest.importorskip("cuda.bindings.runtime")
    from types import SimpleNamespace
    monkeypatch.setattr(torch_stream, "_kept_for_good", [])
    cupy_shaped = SimpleNamespace(cuda=SimpleNamespace(runtime=SimpleNamespace()))   # no stand-in: the real one
    capture = torch_stream.TorchCapture()
    torch_stream._hold_for_graph(capture, cupy_shaped, 0)
    assert torch_stream._kept_for_good == [capture]
    assert torch_stream._semaphores() is not None and torch_stream._sem_post
    err, _ = cudart.cudaUserObjectCreate(0, cudart.cudaHostFn_t(torch_stream._sem_post), 1,
                                         int(cudart.cudaUserObjectFlags.cudaUserObjectNoDestructorSync))
    assert isinstance(err, cudart.cudaError_t)   # (on a GPU an object never released: its destructor never runs)
    err, = cudart.cudaGraphRetainUserObject(cudart.cudaGraph_t(), cudart.cudaUserObject_t(), 1,
                                            int(cudart.cudaUserObjectRetainFlags.cudaGraphUserObjectMove))
    assert isinstance(err, cudart.cudaError_t) and err != cudart.cudaError_t.cudaSuccess   # a null graph


def test_captured_host_tensor_is_copied_from_pinned_memory_the_capture_keeps(gpu):
    """A host tensor among a captured call's GPU tensors (CTC's targets): copied from a pinned copy that the
    capture keeps (a captured copy re-reads its source at every replay; PyTorch refuses a captured copy
    from pageable memory); outside a capture, copied as it is."""
    if gpu.standin is None:
        pytest.skip("the stand-in's host tensors; on a GPU test_cuda_graph_capture_of_ctc_mean covers it")
    (lp, targets, il, tl, blank, zi), _ = _case("ctc_loss", gpu.kind)
    with on_cpu_device(gpu.kind):
        expected = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)[0]
    gpu.standin.host.add(targets.untyped_storage().data_ptr())
    side = gpu.new_stream()
    with gpu.stream(side):
        eager, _ = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)
        gpu.synchronize(side)
        assert not gpu.standin.pinned_copies
        side.cupy.begin_capture()
        out, _ = aclnn.ctc_loss(lp, targets, il, tl, blank, zi)
        graph = side.cupy.end_capture()
    copies = gpu.standin.pinned_copies      # the targets, then the launches' tables (bytes)
    assert torch.equal(copies[0], targets) and all(c.dtype == torch.uint8 for c in copies[1:])
    assert any(kept is copies[0] for kept in _latest_capture().keep)
    with gpu.stream(side):
        graph.launch(side.cupy)
    gpu.synchronize(side)
    _close((eager,), (expected,))
    _close((out,), (expected,))


def test_captured_gemm_workspace_comes_from_torch_one_per_stream(gpu, monkeypatch):
    """The cuBLAS workspace of GEMMs captured on a PyTorch stream comes from PyTorch's allocator (CuPy's
    cudaMalloc would end a global-mode capture), one per GPU and stream, shared by later captures there."""
    from types import SimpleNamespace
    monkeypatch.setattr(torch_stream, "_capture_workspaces", {})   # (PyTorch recycles stream handles)

    from aclnn_gpu.kernels import gemm
    cuda_gemm_workspace = cuda_device.CudaDevice._cublas_workspace
    device = SimpleNamespace(properties={"major": 9}, cp=None)

    def workspace(stream):
        call = SimpleNamespace(gpu=gpu.gpu, index=0, stream=stream, torch_device=gpu.device)
        return cuda_gemm_workspace(device, torch_stream.TorchStream(None, torch_stream.TorchCapture(), call))

    before = len(gpu.allocations)
    side, other = gpu.new_stream(), gpu.new_stream()
    first, again, elsewhere = workspace(side), workspace(side), workspace(other)
    size = gemm.capture_workspace_bytes(9)
    assert first[1] == size and first == again and elsewhere[0] != first[0]
    made = gpu.allocations[before:]
    assert [(ptr, nbytes) for ptr, nbytes, _, _ in made] == [(first[0], size), (elsewhere[0], size)]
    assert cuda_gemm_workspace(device, torch_stream.TorchStream(None, None, None)) is None   # not capturing


def test_relaxed_capture_mode_swaps_and_restores(monkeypatch):
    """TorchCuda.pinned's host allocation runs with the thread in relaxed capture mode, then the thread's
    own mode again, also when the block raises; a failed swap is an error, not a silent global mode."""
    cudart = pytest.importorskip("cuda.bindings.runtime")
    mode, success = cudart.cudaStreamCaptureMode, cudart.cudaError_t.cudaSuccess
    calls, current = [], [mode.cudaStreamCaptureModeGlobal]

    def exchange(new):
        calls.append(new)
        previous, current[0] = current[0], new
        return success, previous
    monkeypatch.setattr(cudart, "cudaThreadExchangeStreamCaptureMode", exchange)
    with torch_stream._relaxed_capture_mode():
        assert current[0] == mode.cudaStreamCaptureModeRelaxed
    assert calls == [mode.cudaStreamCaptureModeRelaxed, mode.cudaStreamCaptureModeGlobal]
    with pytest.raises(KeyError), torch_stream._relaxed_capture_mode():
        raise KeyError("inside")
    assert current[0] == mode.cudaStreamCaptureModeGlobal
    monkeypatch.setattr(cudart, "cudaThreadExchangeStreamCaptureMode",
                        lambda new: (cudart.cudaError_t.cudaErrorInvalidValue, None))
    with pytest.raises(RuntimeError, match="cudaThreadExchangeStreamCaptureMode: cudaErrorInvalidValue"):
        with torch_stream._relaxed_capture_mode():
            pass


# ---------------------------------------------------------------------------- a GPU only
def _gpu_only(gpu):
    if gpu.kind != "cuda":
        pytest.skip("PyTorch's own CUDA graphs and ops on the GPU: a GPU only (the stand-in runs no PyTorch op "
                    "in stream order)")


B, T, V, D = 8, 32, 50, 64


def _attention_params(device):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=g) / math.sqrt(s[-2] if len(s) > 1 else 1)).to(device)  # noqa: E731
    return {"emb": r(V, D), "wc": r(3, D, D), "bc": torch.zeros(D, device=device), "wq": r(D, D), "wk": r(D, D),
            "wv": r(D, D), "out": r(D, V)}


def _attention_loss(p, x, y, ops=AT):
    h = p["emb"][x.t()]
    h = h + torch.relu(ops.conv_tbc(h, p["wc"], p["bc"], 2)[:T])
    hb = h.transpose(0, 1)
    scores = ((hb @ p["wq"]) @ (hb @ p["wk"]).transpose(1, 2)).unsqueeze(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    attn = ops.scaled_masked_softmax(scores, causal.expand(B, 1, T, T), 1.0 / math.sqrt(D))
    hb = hb + attn.squeeze(1) @ (hb @ p["wv"])
    return ops.cross_entropy((hb @ p["out"]).reshape(B * T, V), y.reshape(B * T))


def _batch(seed, device):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, T + 1), generator=g).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


@pytest.mark.parametrize("mode", ["global", "relaxed"])
def test_cuda_graph_capture_of_a_training_step(gpu, mode):
    """torch.cuda.graph captures the attention step's forward and backward (every aclnn:: call on the
    capture stream, results and workspaces in the graph's pool); replays on new batches give the eager
    step's loss and gradients."""
    _gpu_only(gpu)
    torch.backends.cuda.matmul.allow_tf32 = False
    params = {k: v.requires_grad_(True) for k, v in _attention_params(gpu.device).items()}
    static_x, static_y = _batch(0, gpu.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):                                         # warm-up: kernels compiled, pools made
            torch.autograd.grad(_attention_loss(params, static_x, static_y), list(params.values()))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=mode):
        static_loss = _attention_loss(params, static_x, static_y)
        static_grads = torch.autograd.grad(static_loss, list(params.values()))
    for seed in (1, 2):
        x, y = _batch(seed, gpu.device)
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        loss = _attention_loss(params, x, y)
        grads = torch.autograd.grad(loss, list(params.values()))
        torch.cuda.synchronize()
        torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-6)
        for a, e in zip(static_grads, grads):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["global", "relaxed"])
def test_cuda_graph_capture_of_ctc_mean(gpu, mode):
    """torch.cuda.graph captures CTC with host targets and lengths and the mean reduction (host tables,
    a host tensor copied to the GPU, the lengths' tensor made on the GPU) forward and backward, in
    PyTorch's default global mode too; replays give the eager loss and gradient."""
    _gpu_only(gpu)
    (lp, targets, il, tl, blank, zi), _ = _case("ctc_loss", gpu.kind)
    static = lp.to(gpu.device).requires_grad_(True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.autograd.grad(AT.ctc_loss(static, targets, il, tl, blank, "mean", zi), [static])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=mode):
        static_loss = AT.ctc_loss(static, targets, il, tl, blank, "mean", zi)
        static_grad, = torch.autograd.grad(static_loss, [static])
    for value in (lp.flip(2).contiguous(), lp):
        with torch.no_grad():
            static.copy_(value.to(gpu.device))
        graph.replay()
        x = value.to(gpu.device).requires_grad_(True)
        loss = AT.ctc_loss(x, targets, il, tl, blank, "mean", zi)
        grad, = torch.autograd.grad(loss, [x])
        torch.cuda.synchronize()
        torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(static_grad, grad, rtol=1e-4, atol=1e-6)


def test_cuda_graph_reset_releases_what_its_capture_kept(gpu):
    """A torch.cuda.graph capture's plans and pinned buffers are held by a CUDA user object on the graph:
    while the CUDAGraph lives they stay; after `reset()` CUDA runs the destructor on its own thread
    (asynchronously: waited for here, at most a minute, by polling release_graphs), and they go."""
    import time
    _gpu_only(gpu)
    (lp, targets, il, tl, blank, zi), _ = _case("ctc_loss", gpu.kind)
    static = lp.to(gpu.device)
    targets = targets.to(gpu.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        aclnn.ctc_loss(static, targets, il, tl, blank, zi)
    torch.cuda.synchronize()
    gc.collect()
    graphs, kept = torch_stream.release_graphs(), torch_stream.held_captures()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        aclnn.ctc_loss(static, targets, il, tl, blank, zi)
    held = torch_stream.held_captures()
    assert held > kept and torch_stream.release_graphs() == graphs + 1
    graph.replay()
    torch.cuda.synchronize()
    assert torch_stream.release_graphs() == graphs + 1
    graph.reset()
    del graph
    torch.cuda.synchronize()
    deadline = time.monotonic() + 60
    while torch_stream.release_graphs() > graphs and time.monotonic() < deadline:   # (earlier tests' graphs
        time.sleep(0.01)                                                            # may go meanwhile too)
    assert torch_stream.release_graphs() <= graphs and torch_stream.held_captures() <= kept < held


def test_results_live_in_the_caching_allocator_on_the_side_stream(gpu):
    """PyTorch's memory snapshot holds each result in a segment of the side stream: the caching allocator's
    stream bookkeeping (record_stream, reuse only on that stream) applies to it."""
    _gpu_only(gpu)
    args, _ = _case("conv_tbc", gpu.kind)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = aclnn.conv_tbc(*_to(args, gpu.device))
    side.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    ptr = out.untyped_storage().data_ptr()
    owners = [seg for seg in snapshot["segments"]
              if seg["address"] <= ptr < seg["address"] + seg["total_size"]]
    assert len(owners) == 1 and owners[0]["stream"] == side.cuda_stream, owners


class _CountingLibc:
    """libc with its sem_getvalue calls counted (the holds' poll)."""

    def __init__(self, libc):
        self._libc, self.getvalue_calls = libc, 0

    def sem_getvalue(self, *args):
        self.getvalue_calls += 1
        return self._libc.sem_getvalue(*args)

    def __getattr__(self, name):
        return getattr(self._libc, name)


def test_eager_calls_poll_the_graph_holds_at_a_bounded_rate_and_semaphores_are_reused(monkeypatch):
    """While graphs are held a call polls them (one sem_getvalue per hold) only every _POLL_CALLS calls
    or once _POLL_SECONDS passed, not at every call; release_graphs() polls at once. A released hold's
    semaphore is never freed: it is retired, and handed out again only from the poll after."""
    libc = torch_stream._semaphores()
    if libc is None:
        pytest.skip("no libc semaphores here")
    counting = _CountingLibc(libc)
    monkeypatch.setattr(torch_stream, "_libc", counting)
    monkeypatch.setattr(torch_stream, "_holds", {})
    monkeypatch.setattr(torch_stream, "_retired_semaphores", [])
    monkeypatch.setattr(torch_stream, "_free_semaphores", [])
    monkeypatch.setattr(torch_stream, "_POLL_SECONDS", 3600.0)   # the call count decides here
    semaphores = [libc.malloc(torch_stream._SEM_BYTES) for _ in range(3)]
    for k, sem in enumerate(semaphores):
        assert sem and libc.sem_init(sem, 0, 0) == 0
        torch_stream._holds[k] = torch_stream._GraphHold(sem)
        torch_stream._holds[k].captures.append(object())
    assert torch_stream.release_graphs() == 3 and counting.getvalue_calls == 3
    for _ in range(torch_stream._POLL_CALLS - 1):
        torch_stream._poll_graphs()
    assert counting.getvalue_calls == 3                             # 63 calls: no poll
    torch_stream._poll_graphs()
    assert counting.getvalue_calls == 6                             # the 64th: one poll of the 3 holds
    monkeypatch.setattr(torch_stream, "_POLL_SECONDS", 0.0)         # the time decides: every call polls
    torch_stream._poll_graphs()
    assert counting.getvalue_calls == 9

    libc.sem_post(ctypes.c_void_p(semaphores[1]))                   # graph 1's destructor ran
    assert torch_stream.release_graphs() == 2 and 1 not in torch_stream._holds
    assert torch_stream._retired_semaphores == [semaphores[1]] and torch_stream._free_semaphores == []
    assert torch_stream.release_graphs() == 2                       # one poll later: reusable
    assert torch_stream._retired_semaphores == [] and torch_stream._free_semaphores == [semaphores[1]]
    for sem in semaphores:   # nothing posts them any more here
        libc.free(sem)

