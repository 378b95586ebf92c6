"""Training engines behind one small interface: DeepSpeed (ZeRO 0-3, one or many processes) and plain torch.

The updater only calls ``backward(loss)`` per micro-batch and ``step()`` per optimizer step; the engine owns the
optimizer (AdamW), the LR schedule (linear warmup then constant, as RuCL's verl runs), gradient clipping, and
saving/loading its own state. ``module`` is the trainable ``nn.Module`` (never a wrapper), so adapters and the
rollout generator use it directly.

DeepSpeed on CPU (see ../shared/notes/cpu-stack.md):

* a single process still needs ``RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT`` or DeepSpeed tries MPI:
  ``ensure_dist_env`` sets them (a free port) when a launcher did not;
* the process group is initialised here (``init_process_group``), not by DeepSpeed's ``env://``, whose TCP store
  listens on every interface even with ``MASTER_ADDR=127.0.0.1``: one process uses an in-memory store (no port),
  several processes on one machine a store bound to loopback; only a ``MASTER_ADDR`` naming another machine gets
  torch's store on every interface;
* ``gloo`` is the CPU backend; gradient accumulation is *unmanaged* (``managed_gradient_accumulation=false``), so
  ``step()`` is the one accumulation boundary whatever the number of micro-batches;
* first use JIT-compiles ops (the shm all-reduce op on every ``deepspeed.comm`` start, cpu_adam when offloading)
  into ``TORCH_EXTENSIONS_DIR``, which ``rubricflow.util.env`` points into ``.rubricflow/`` so the cost is paid once.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import torch

from rubricflow.grpo.config import EngineConfig, GRPOConfig


class Engine(Protocol):
    module: torch.nn.Module
    rank: int
    world_size: int
    kind: str

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> dict[str, float]:
        """Clip, apply the optimizer update and the LR schedule; return ``{"grad_norm", "lr"}``."""
        ...

    def save(self, path: str | Path) -> None:
        """Collective on all ranks: write model + optimizer + LR schedule state under ``path``."""
        ...

    def load(self, path: str | Path) -> None: ...

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]: ...

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj`` (picklable), in rank order."""
        ...

    def barrier(self) -> None: ...


def warmup_constant(warmup_steps: int):
    """LR multiplier: linear warmup over ``warmup_steps`` optimizer steps, then 1."""

    def f(step: int) -> float:
        return 1.0 if warmup_steps <= 0 else min(1.0, (step + 1) / warmup_steps)

    return f


def _trainable(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


# ----------------------------------------------------------------------------------------------------------------
# Plain torch


class TorchEngine:
    """One process, ``torch.optim.AdamW``, grad-norm clipping, warmup-constant LR. The reference engine.

    Reads ``grpo.lr``, ``weight_decay``, ``warmup_steps``, ``max_grad_norm`` and ``grpo.engine`` (device, AdamW
    betas and epsilon); ``grpo.engine.kind`` is ``make_engine``'s choice and is not checked here.
    """

    kind = "torch"

    def __init__(self, module: torch.nn.Module, grpo: GRPOConfig):
        cfg = grpo.engine
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise RuntimeError(
                f"engine.kind=torch runs one process but WORLD_SIZE={os.environ['WORLD_SIZE']}; "
                "use engine.kind=deepspeed for several processes"
            )
        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"engine.device=cuda but torch {torch.__version__} sees no CUDA device "
                f"(built with CUDA {torch.version.cuda}); set engine.device=cpu or run on a GPU machine"
            )
        self.module = module.to(cfg.device)
        self.rank, self.world_size = 0, 1
        self.max_grad_norm = grpo.max_grad_norm
        self.optimizer = torch.optim.AdamW(
            _trainable(module),
            lr=grpo.lr,
            weight_decay=grpo.weight_decay,
            betas=tuple(cfg.adam_betas),
            eps=cfg.adam_eps,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_constant(grpo.warmup_steps))
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> dict[str, float]:
        params = _trainable(self.module)
        if self.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        else:
            norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": norm, "lr": lr}

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
            },
            p / "engine.pt",
        )

    def load(self, path: str | Path) -> None:
        f = Path(path) / "engine.pt"
        if not f.exists():
            raise FileNotFoundError(
                f"{f}: no torch engine state here (was the checkpoint written by engine.kind=torch?)")
        state = torch.load(f, map_location="cpu", weights_only=False)
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]:
        return dict(values)

    def all_gather_object(self, obj) -> list:
        return [obj]

    def barrier(self) -> None:
        return None


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_dist_env() -> dict[str, str]:
    """Set the torch.distributed rendezvous variables for a single process when no launcher set them.

    Returns the variables that were set here (empty under torchrun / the deepspeed launcher).
    """
    set_here = {}
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for k, v in defaults.items():
        if k not in os.environ:
            os.environ[k] = set_here[k] = v
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = set_here["MASTER_PORT"] = str(_free_port())
    return set_here


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) means this machine only: every address it resolves to is loopback."""
    h = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        addrs = {info[4][0] for info in socket.getaddrinfo(h, None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return False
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def _loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS), or None where neither exists."""
    try:
        names = {n for _, n in socket.if_nameindex()}
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def init_process_group(backend: str, timeout: timedelta | None = None) -> str:
    """Initialise ``torch.distributed`` (rank, world size and rendezvous from :func:`ensure_dist_env`'s variables)
    with no listening socket beyond loopback on one machine. Returns how the rendezvous was done:

    * ``"hash"``: one process: an in-memory store (``HashStore``), no rendezvous port at all;
    * ``"launcher"``: several processes whose launcher holds the store (torchrun: ``TORCHELASTIC_USE_AGENT_STORE``);
      this process only connects to it;
    * ``"loopback"``: several processes, ``MASTER_ADDR`` is loopback: rank 0's TCP store listens on
      ``127.0.0.1:MASTER_PORT`` (``::1`` for an IPv6 loopback), never on every interface as torch's ``env://`` does;
    * ``"env"``: ``MASTER_ADDR`` names another machine (several nodes): torch's ``env://`` rendezvous, whose store
      listens on every interface so that the other nodes reach it;
    * ``"already"``: ``torch.distributed`` was initialised before (by the caller).

    With a loopback ``MASTER_ADDR`` the collective backend is kept on the loopback interface too (gloo and NCCL
    bind the hostname's address otherwise), unless ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` name another.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return "already"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    timeout = timeout or timedelta(minutes=int(os.environ.get("DEEPSPEED_TIMEOUT", "10")))
    local = _is_loopback(addr)
    ifname_var = {"gloo": "GLOO_SOCKET_IFNAME", "nccl": "NCCL_SOCKET_IFNAME"}.get(backend)
    if local and ifname_var and (lo := _loopback_interface()):
        os.environ.setdefault(ifname_var, lo)
    if world == 1:
        how, store = "hash", dist.HashStore()
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        how, store = "launcher", None
    elif not local:
        how, store = "env", None
    elif rank == 0:
        how = "loopback"
        host = addr.strip().strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        bind = ("::1" if family == socket.AF_INET6 else "127.0.0.1", port)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(bind)
            sock.listen(max(128, world))
        except OSError as e:
            sock.close()
            raise RuntimeError(f"rendezvous: cannot listen on {bind[0]}:{port} (MASTER_PORT): {e.strerror or e}; "
                               f"stop what listens there or choose another MASTER_PORT") from None
        # the store owns the listening socket from here (detach: Python must not close its descriptor)
        store = dist.TCPStore(host, port, world, True, timeout, master_listen_fd=sock.detach())
    else:
        how, store = "loopback", dist.TCPStore(addr.strip().strip("[]"), port, world, False, timeout)
    if store is None:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return how


def _configure_shm_comm(enabled: bool) -> bool:
    """Whether DeepSpeed's CPU shared-memory all-reduce op is used (CPU accelerator only).

    ``deepspeed.comm`` JIT-compiles it (shm.cpp, minutes of CPU: docs/operations.md, "Measurements behind defaults") on
    its first start even for one process, where it is useless. When disabled we mark the op incompatible in
    DeepSpeed's probe table (``deepspeed.ops.__compatible_ops__``; the module keeps that dict so the edit holds)
    and all-reduce goes through plain gloo. Enable it for several CPU processes with large models; once built it
    is cached in TORCH_EXTENSIONS_DIR.
    """
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        return False
    import deepspeed.ops

    table = deepspeed.ops.__compatible_ops__
    if not enabled:
        table["deepspeed_shm_comm"] = False
    return bool(table.get("deepspeed_shm_comm", False))


def deepspeed_config(cfg: EngineConfig, max_grad_norm: float, micro_batch_size: int = 1) -> dict:
    """The DeepSpeed JSON config for ``cfg`` (optimizer and scheduler are passed as objects, not here)."""
    zero: dict = {"stage": cfg.zero_stage}
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if cfg.zero_stage >= 2:
        zero["overlap_comm"] = False  # unmanaged accumulation + overlap is only supported on stage 2; keep it simple
    return {
        "train_micro_batch_size_per_gpu": max(1, micro_batch_size),
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": float(max_grad_norm),
        "zero_optimization": zero,
        "bf16": {"enabled": bool(cfg.bf16)},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }


class DeepSpeedEngine:
    """``deepspeed.initialize`` around the module with AdamW (torch) or DeepSpeedCPUAdam (when offloading).

    Reads the same ``grpo`` fields as ``TorchEngine`` plus the DeepSpeed settings of ``grpo.engine``.
    """

    kind = "deepspeed"

    def __init__(self, module: torch.nn.Module, grpo: GRPOConfig):
        cfg = grpo.engine
        lr, weight_decay, max_grad_norm = grpo.lr, grpo.weight_decay, grpo.max_grad_norm
        ensure_dist_env()
        t0 = time.perf_counter()
        import deepspeed

        self.timings: dict[str, float] = {"import_s": time.perf_counter() - t0}
        t0 = time.perf_counter()
        self.shm_comm = _configure_shm_comm(cfg.cpu_shm_comm)
        from deepspeed.constants import default_pg_timeout

        self.rendezvous = init_process_group(cfg.dist_backend, default_pg_timeout)  # no listener beyond loopback
        deepspeed.init_distributed(dist_backend=cfg.dist_backend)  # adopts the process group initialised above
        self.timings["init_distributed_s"] = time.perf_counter() - t0
        params = _trainable(module)
        betas = tuple(cfg.adam_betas)
        t0 = time.perf_counter()
        if cfg.offload_optimizer:
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            optimizer = DeepSpeedCPUAdam(
                params, lr=lr, betas=betas, eps=cfg.adam_eps, weight_decay=weight_decay, adamw_mode=True
            )
        else:
            optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=cfg.adam_eps, weight_decay=weight_decay)
        self.timings["optimizer_s"] = time.perf_counter() - t0
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_constant(grpo.warmup_steps))
        t0 = time.perf_counter()
        self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=module,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            config=deepspeed_config(cfg, max_grad_norm),
            dist_init_required=False,
        )
        self.timings["initialize_s"] = time.perf_counter() - t0
        self.module = self.ds.module
        self.cfg = cfg
        self._last_norm: float | None = None
        if cfg.zero_stage == 0 and not cfg.bf16 and max_grad_norm > 0:
            # DeepSpeed clips fp32 ZeRO-0 gradients without keeping the norm: record it (same call, same result)
            from deepspeed.runtime.utils import clip_grad_norm_

            def clip_and_record():
                self._last_norm = float(clip_grad_norm_(self.ds.module.parameters(), max_grad_norm, mpu=None))

            self.ds.clip_fp32_gradients = clip_and_record
        import deepspeed.comm as dist

        self._dist = dist
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def backward(self, loss: torch.Tensor) -> None:
        self.ds.backward(loss, scale_wrt_gas=False)

    def step(self) -> dict[str, float]:
        lr = float(self.ds.get_lr()[0])
        self._last_norm = None
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        norm = self._last_norm if norm is None else norm
        return {"grad_norm": float(norm) if norm is not None else float("nan"), "lr": lr}

    def save(self, path: str | Path) -> None:
        self.ds.save_checkpoint(str(path), tag="engine", save_latest=False)

    def load(self, path: str | Path) -> None:
        p = Path(path) / "engine"
        if not p.exists():
            raise FileNotFoundError(f"{p}: no DeepSpeed engine state here (was it written by engine.kind=deepspeed?)")
        load_path, _ = self.ds.load_checkpoint(
            str(path), tag="engine", load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if load_path is None:
            raise RuntimeError(f"{p}: DeepSpeed could not load the checkpoint")

    def all_reduce_mean(self, values: dict[str, float]) -> dict[str, float]:
        """Mean of each metric over the ranks that report it (ranks may hold different roles' keys)."""
        if self.world_size == 1:
            return dict(values)
        import torch.distributed as tdist

        gathered: list = [None] * self.world_size
        tdist.all_gather_object(gathered, dict(values))
        keys = sorted({k for g in gathered for k in g})
        out = {}
        for k in keys:
            vals = [float(g[k]) for g in gathered if k in g]
            out[k] = sum(vals) / len(vals)
        return out

    def all_gather_object(self, obj) -> list:
        if self.world_size == 1:
            return [obj]
        import torch.distributed as tdist

        out: list = [None] * self.world_size
        tdist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self._dist.barrier()


def make_engine(module: torch.nn.Module, grpo: GRPOConfig) -> Engine:
    """The engine named by ``grpo.engine.kind``, with the optimizer settings of the GRPO section ``grpo``."""
    kind = grpo.engine.kind
    if kind == "torch":
        return TorchEngine(module, grpo)
    if kind == "deepspeed":
        return DeepSpeedEngine(module, grpo)
    raise ValueError(f"engine.kind: expected 'deepspeed' or 'torch', got {kind!r}")
