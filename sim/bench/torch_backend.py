"""The PyTorch timing backend of ``clustersim bench``: each spec of ``sim.bench.specs`` run on one
CUDA GPU, timed as ``validation/compute/README.md`` states (CUDA events around one call, warm-up
calls first, the median of the timed calls; random N(0, 1) bf16 inputs).

PyTorch is an optional extra (``pip install 'clustersim[bench]'``); it is imported when the
backend opens, never by the rest of clustersim. The method follows the one-off scripts that
measured the committed tables (``benchmarks/device/``).
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import ConfigError, InfeasibleError
from .runner import CaseSkipped
from .specs import ATTENTION_BACKENDS, Attention, Gemm, GroupedGemm, Kernel, Memory, Optimizer

__all__ = ["TorchBackend", "open_torch"]

NEEDS_TORCH = "clustersim bench needs PyTorch: pip install 'clustersim[bench]'"
_E4M3_MAX = 448.0
_SMI_FIELDS = "name,clocks.max.sm,clocks.max.memory,power.limit,driver_version"


def median_call_s(cuda: Any, fn: Callable[[], object], reps: int) -> float:
    """The median of *reps* calls of *fn*, each timed by CUDA events around it (the README's method;
    warm-up calls are the caller's)."""
    times = []
    for _ in range(reps):
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)      # ms -> s
    return statistics.median(times)


def open_torch(device: int) -> TorchBackend:
    """The backend on CUDA GPU *device*: ``InfeasibleError`` without PyTorch or a CUDA GPU,
    ``ConfigError`` for a device index the machine does not have."""
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise InfeasibleError(NEEDS_TORCH) from None
    if not torch.cuda.is_available():
        build = torch.version.cuda or "none: a CPU-only build"
        raise InfeasibleError(f"clustersim bench needs a CUDA GPU; PyTorch {torch.__version__} (CUDA "
                              f"{build}) sees none")
    n = torch.cuda.device_count()
    if not 0 <= device < n:
        raise ConfigError(f"--device: {device}: this machine has {n} CUDA GPU(s), 0..{n - 1}")
    return TorchBackend(torch, device)


class TorchBackend:
    """``sim.bench.runner.TimingBackend`` on one CUDA GPU through PyTorch."""

    def __init__(self, torch: Any, device: int) -> None:
        self.torch = torch
        self.index = device
        self.dev = torch.device("cuda", device)
        torch.cuda.set_device(self.dev)
        torch.manual_seed(0)
        self._builders: dict[type, Callable[[Any], tuple[Callable[[], object], Any]]] = {
            Gemm: self._gemm, GroupedGemm: self._grouped, Attention: self._attention,
            Memory: self._memory, Optimizer: self._optimizer}

    # ------------------------------------------------------------------ the machine
    def describe(self) -> dict[str, object]:
        t = self.torch
        p = t.cuda.get_device_properties(self.dev)
        env: dict[str, object] = {
            "gpu": p.name, "sms": p.multi_processor_count, "mem_GiB": p.total_memory / 2**30,
            "capability": ".".join(map(str, t.cuda.get_device_capability(self.dev))),
            "torch": t.__version__, "cuda": t.version.cuda, "cudnn": t.backends.cudnn.version(),
            "device": self.index, "gpus": t.cuda.device_count()}
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", f"--query-gpu={_SMI_FIELDS}", "--format=csv", f"--id={self.index}"],
                capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.SubprocessError) as e:
            env["nvidia_smi"] = f"not run: {e}"
        return env

    def gpu_count(self) -> int:
        return int(self.torch.cuda.device_count())

    def free_bytes(self) -> float:
        cuda = self.torch.cuda
        free, _ = cuda.mem_get_info(self.dev)
        # blocks PyTorch's allocator holds but no tensor uses are free to the next case
        return float(free + cuda.memory_reserved(self.dev) - cuda.memory_allocated(self.dev))

    def unsupported(self, kernel: Kernel) -> str | None:
        t = self.torch
        if isinstance(kernel, Gemm) and kernel.dtype == "fp8":
            if not (hasattr(t, "float8_e4m3fn") and hasattr(t, "_scaled_mm")):
                return f"PyTorch {t.__version__} has no FP8 GEMM (torch._scaled_mm)"
            if t.cuda.get_device_capability(self.dev) < (8, 9):
                return "this GPU has no FP8 tensor cores (compute capability < 8.9)"
        if isinstance(kernel, GroupedGemm) and not hasattr(t, "_grouped_mm"):
            return f"PyTorch {t.__version__} has no torch._grouped_mm"
        if isinstance(kernel, Attention):
            from torch.nn.attention import SDPBackend  # type: ignore[import-not-found, unused-ignore]

            if not hasattr(SDPBackend, kernel.backend):
                return f"PyTorch {t.__version__} has no SDPA backend {kernel.backend}"
        if isinstance(kernel, Memory) and kernel.op.startswith("rmsnorm") \
                and not hasattr(t.nn.functional, "rms_norm"):
            return f"PyTorch {t.__version__} has no F.rms_norm (2.4 and later)"
        return None

    # ------------------------------------------------------------------ timing
    def time_s(self, kernel: Kernel, warmup: int, reps: int) -> float:
        t = self.torch
        try:
            return self._median_s(kernel, warmup, reps)
        except t.cuda.OutOfMemoryError:
            raise CaseSkipped("out of GPU memory") from None
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
            # a kernel this build refuses for this shape (no SDPA kernel, a grouped GEMM layout)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CaseSkipped(f"{type(e).__name__}: {first[:200]}") from None
        finally:
            t.cuda.empty_cache()      # the case's inputs are gone: give the next its memory

    def _median_s(self, kernel: Kernel, warmup: int, reps: int) -> float:
        fn, ctx = self._builders[type(kernel)](kernel)
        with ctx:
            return self._time_fn(fn, warmup, reps)

    def _time_fn(self, fn: Callable[[], object], warmup: int, reps: int) -> float:
        for _ in range(warmup):
            fn()
        self.torch.cuda.synchronize(self.dev)
        return median_call_s(self.torch.cuda, fn, reps)

    def _randn(self, *shape: int) -> Any:
        return self.torch.randn(*shape, device=self.dev, dtype=self.torch.bfloat16)

    def _gemm(self, g: Gemm) -> tuple[Callable[[], object], Any]:
        t, (m, n, k) = self.torch, (g.m, g.n, g.k)
        none = contextlib.nullcontext()
        if g.dtype == "fp8":
            a, w = self._randn(m, k), self._randn(n, k)
            sa, sw = (x.abs().amax().float() / _E4M3_MAX for x in (a, w))
            aq, wq = (a / sa).to(t.float8_e4m3fn), (w / sw).to(t.float8_e4m3fn)
            del a, w
            # cuBLASLt's FP8 GEMM wants A row-major and B column-major: B = wq^T of a [n, k] wq
            return (lambda: t._scaled_mm(aq, wq.t(), scale_a=sa, scale_b=sw, out_dtype=t.bfloat16)), none
        if g.layout == "fwd":                       # y[m, n] = x[m, k] W[n, k]^T
            x, w = self._randn(m, k), self._randn(n, k)
            return (lambda: t.nn.functional.linear(x, w)), none
        if g.layout == "wgrad":                     # dW[m, n] = dy[k, m]^T x[k, n]
            dy, x = self._randn(k, m), self._randn(k, n)
            return (lambda: dy.t() @ x), none
        a, b = self._randn(m, k), self._randn(k, n)  # dgrad dx = dy[m, k] W[k, n]; square a @ b
        return (lambda: a @ b), none

    def _grouped(self, g: GroupedGemm) -> tuple[Callable[[], object], Any]:
        t = self.torch
        a = self._randn(g.experts * g.tokens_per_expert, g.k)
        w = self._randn(g.experts, g.n, g.k)         # B column-major per expert, as sm90 wants it
        offs = (t.arange(1, g.experts + 1, device=self.dev, dtype=t.int32) * g.tokens_per_expert)
        return (lambda: t._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=t.bfloat16)), \
            contextlib.nullcontext()

    def _attention(self, a: Attention) -> tuple[Callable[[], object], Any]:
        t = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel  # type: ignore[import-not-found, unused-ignore]

        assert a.backend in ATTENTION_BACKENDS, a.backend
        s = a.shape
        # [batch, heads, seq, head_dim]; GQA's K/V expanded to every head first (README)
        q, k, v = (self._randn(s.batch, s.heads, s.seq_q, s.head_dim).requires_grad_(a.backward)
                   for _ in range(3))
        sdpa = t.nn.functional.scaled_dot_product_attention
        ctx = sdpa_kernel(getattr(SDPBackend, a.backend))
        if not a.backward:
            def fwd() -> object:
                with t.no_grad():
                    return sdpa(q, k, v, is_causal=s.causal)
            return fwd, ctx
        dout = self._randn(s.batch, s.heads, s.seq_q, s.head_dim)

        def fwd_bwd() -> object:                   # grads returned, not accumulated into .grad
            return t.autograd.grad(sdpa(q, k, v, is_causal=s.causal), (q, k, v), dout)
        return fwd_bwd, ctx

    def _memory(self, mem: Memory) -> tuple[Callable[[], object], Any]:
        t, f = self.torch, self.torch.nn.functional
        r, c = mem.rows, mem.cols
        none = contextlib.nullcontext()
        if mem.op == "copy":
            src, dst = self._randn(r), self.torch.empty(r, device=self.dev, dtype=t.bfloat16)
            return (lambda: dst.copy_(src)), none
        if mem.op == "swiglu_fwd":
            u, v = self._randn(r, c // 2), self._randn(r, c // 2)
            return (lambda: f.silu(u) * v), none
        if mem.op == "residual_add":
            x, y = self._randn(r, c), self._randn(r, c)
            return (lambda: x + y), none
        x, w = self._randn(r, c), t.ones(c, device=self.dev, dtype=t.bfloat16)
        if mem.op == "rmsnorm_fwd":
            def fwd() -> object:
                with t.no_grad():
                    return f.rms_norm(x, (c,), w)
            return fwd, none
        assert mem.op == "rmsnorm_fwd+bwd", mem.op
        x.requires_grad_(True)
        w.requires_grad_(True)
        dy = self._randn(r, c)
        return (lambda: t.autograd.grad(f.rms_norm(x, (c,), w), (x, w), dy)), none

    def _optimizer(self, o: Optimizer) -> tuple[Callable[[], object], Any]:
        t = self.torch
        per = o.params // o.tensors
        params = [t.randn(per, device=self.dev, dtype=t.float32, requires_grad=True)
                  for _ in range(o.tensors)]
        for p in params:
            p.grad = t.randn_like(p)
        flags = {"fused": True} if o.impl == "adamw_fused" else {"foreach": True}
        opt = t.optim.AdamW(params, lr=1e-4, **flags)
        return opt.step, contextlib.nullcontext()   # the warm-up steps allocate the state

    # ------------------------------------------------------------------ NCCL
    def collective_s(self, op: str, sizes: Sequence[int], gpus: int) -> Iterator[tuple[int, int, float]]:
        from .nccl import collective_times

        return collective_times(op, sizes, gpus)
