"""The example programs as a user runs them: the five Ascend sample programs (cpu and emulated
devices), the two training scripts (cpu device, a few steps) and the capture example, each in its own
process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (ROOT / "examples" / "ascend_samples").glob("*.py") if p.stem != "acl_sample")
SAMPLE_NAMES = ["ctc_loss_backward", "cross_entropy_loss_grad", "kl_div_backward", "conv_tbc_backward",
                "scaled_masked_softmax_backward"]


def run(args: list[str], device: str, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, ACLNN_GPU_DEVICE=device, MPLBACKEND="Agg",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=300)


def test_every_backward_operator_has_a_sample():
    assert sorted(p.stem for p in SAMPLES) == sorted(SAMPLE_NAMES)
    assert (ROOT / "examples" / "ascend_samples" / "README.md").exists()
    assert (ROOT / "examples" / "ascend_samples" / "acl_sample.py").exists()   # their common helpers


@pytest.mark.parametrize("device", ["cpu", "emulated"])
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_ascend_sample(name, device):
    proc = run([f"examples/ascend_samples/{name}.py"], device)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "result[0] is: " in proc.stdout or "gradInput[0] is: " in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("max ") and f"(device {device})" in last, last


def test_sample_failure_exits_non_zero_with_the_recent_error(tmp_path):
    """CHECK_RET: a failing call prints aclGetRecentErrMsg and exits non-zero (blank out of range)."""
    source = (ROOT / "examples/ascend_samples/ctc_loss_backward.py").read_text()
    broken = source.replace("T, N, C, maxL, blank = 12, 4, 5, 5, 0", "T, N, C, maxL, blank = 12, 4, 5, 5, 0\n"
                            "    blankArg = 7")
    broken = broken.replace("negLogLikelihood, logAlpha, blank,\n", "negLogLikelihood, logAlpha, blankArg,\n")
    assert broken.count("blankArg") == 2
    program = tmp_path / "broken_sample.py"
    program.write_text(broken)
    (tmp_path / "acl_sample.py").write_text((ROOT / "examples/ascend_samples/acl_sample.py").read_text())
    proc = run([str(program)], "cpu")
    assert proc.returncode != 0
    assert "aclnnCtcLossBackwardGetWorkspaceSize failed. ERROR: 161002" in proc.stdout
    assert "aclGetRecentErrMsg: aclnnCtcLossBackward" in proc.stdout and "blank" in proc.stdout


@pytest.mark.parametrize("script", ["train_ctc.py", "train_attention.py"])
def test_training_script(script, tmp_path):
    pytest.importorskip("torch")
    proc = run([f"examples/{script}", "--out", str(tmp_path)], "cpu", ACLNN_EXAMPLE_STEPS="6")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and line.split("|")[1].strip()
            .isdigit()]
    assert len(rows) == 6
    for row in rows:
        ours, theirs = float(row.split("|")[2]), float(row.split("|")[3])
        assert abs(ours - theirs) <= 1e-3 * (1 + abs(theirs)), row
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    png = tmp_path / script.replace(".py", ".png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_script_fails_when_the_curves_disagree(tmp_path):
    pytest.importorskip("torch")
    proc = run(["examples/train_ctc.py", "--out", str(tmp_path), "--rtol", "-1"], "cpu", ACLNN_EXAMPLE_STEPS="2")
    assert proc.returncode == 1 and "FAILED: the loss curves disagree" in proc.stdout


@pytest.mark.parametrize("device", ["cpu", "emulated"])
def test_capture_training_step(device):
    """examples/capture_training_step.py: the captured step replayed gives the direct steps' losses
    bit for bit, the loss decreases, and both times per step are printed."""
    proc = run(["examples/capture_training_step.py"], device, ACLNN_EXAMPLE_STEPS="8")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"time per step on {device}: direct calls") and "losses identical over 8 steps" in last


@pytest.mark.parametrize("model", ["attention", "ctc"])
def test_compile_training_step(model):
    """examples/compile_training_step.py: the step eager and under torch.compile(fullgraph=True) (aot_eager
    here: the same tracing without Inductor's code generation, to keep CI short), both within the
    tolerance of PyTorch's own ops, both times printed."""
    pytest.importorskip("torch")
    proc = run(["examples/compile_training_step.py", "--model", model, "--backend", "aot_eager", "--batch", "4",
                "--warmup", "1"], "cpu", ACLNN_EXAMPLE_STEPS="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| aclnn_gpu.torch")]
    assert len(rows) == 2 and "torch.compile(fullgraph=True" in rows[1]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("step time on cpu: eager ") and " ms, compiled " in last, last
