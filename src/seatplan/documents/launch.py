"""How an engine is launched: the one typed value the plan decides for each placed seat and every consumer reads.

A :class:`VllmLaunch` is what a vLLM engine is told, in vLLM's own terms, and nothing about where or how it runs:
no launcher (``vllm serve`` or the module form), no ``--host`` (``render --bind``), no restart mode. The plan
decides it once (``plan/assemble.py``); ``engine.command`` writes it as a command line for a launcher, a bind
address and a situation; ``engine.launch`` reads a command line back into one; ``engine.change`` compares two.

Its KV cache is sized one of two ways (:data:`KvSizing`): pinned in bytes (``--kv-cache-memory-bytes``, vLLM
0.10.2 and later), where ``--gpu-memory-utilization`` only gates vLLM's start-up check, or by utilisation (before
0.10.2), where that fraction sizes the KV cache. Either way the command carries one utilisation, the same at a
cold boot and at a restart; :class:`Utilisation` holds what the plan checked it against in each situation.

A :class:`SeatLaunch` is what starts a seat's engine, vLLM or fixed, with its environment: the unit the change
model compares (what runs, read back from a rendered directory or an older plan, against what the plan wants).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Launch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pinned(_Launch):
    """The KV cache pinned in bytes; vLLM allocates exactly this (vLLM 0.32 ``vllm/v1/worker/gpu_worker.py`` lines
    649-672: ``determine_available_memory`` returns the pin and skips the memory profile), and the utilisation is
    read only by the start-up check (``vllm/v1/worker/utils.py`` lines 716-772, ``request_memory``)."""

    mode: Literal["pinned"] = "pinned"
    kv_cache_memory_bytes: int = Field(ge=0, description="--kv-cache-memory-bytes")
    gpu_memory_utilization: float = Field(gt=0, description="--gpu-memory-utilization: the start-up check's fraction only")


class ByUtilisation(_Launch):
    """The KV cache sized by ``--gpu-memory-utilization`` (vLLM before 0.10.2 has no pin): vLLM gives the KV cache
    what ``ceil(total × fraction)`` leaves after its profile of the weights, activations and CUDA graphs (vLLM 0.32
    ``vllm/v1/worker/gpu_worker.py`` lines 740-744), so the fraction is the engine's whole budget."""

    mode: Literal["utilisation"] = "utilisation"
    gpu_memory_utilization: float = Field(gt=0, description="--gpu-memory-utilization: sizes the KV cache")


KvSizing = Annotated[Pinned | ByUtilisation, Field(discriminator="mode")]


class VllmLaunch(_Launch):
    """What a vLLM engine is started with, decided once by the plan (``engine.command`` writes it)."""

    engine: Literal["vllm"] = "vllm"
    model: str = Field(description="--model: what the engine is given as its model on the host")
    revision: str | None = Field(None, description="--revision (a fleet's ORG/NAME@REVISION)")
    served_model_name: str
    port: int | None
    tensor_parallel_size: int = Field(ge=1)
    max_model_len: int = Field(ge=1)
    kv: KvSizing
    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    max_new_tokens: int | None = Field(None, description="--override-generation-config's max_new_tokens (the output cap)")
    hf_overrides: dict[str, Any] | None = None
    extra_args: list[str] = Field(default_factory=list, description="the operator's extra arguments, appended as given")

    @property
    def gpu_memory_utilization(self) -> float:
        """The one ``--gpu-memory-utilization`` every command of this launch carries."""
        return self.kv.gpu_memory_utilization

    @property
    def kv_pinned(self) -> bool:
        return isinstance(self.kv, Pinned)


class Utilisation(_Launch):
    """What the plan checked the launch's one utilisation against: the highest value that passes vLLM's start-up check
    in each situation the engine starts in, and the free memory each leaves at the snapshot beyond the request
    (negative: vLLM refuses that start)."""

    cold_boot: float = Field(description="the highest value that passes at a cold boot of the host, in boot order")
    rolling_restart: float = Field(description="the highest value that passes restarted alone beside its neighbours at plateau")
    cold_boot_headroom_bytes: int | None = Field(None, description="free at the snapshot less the request, at a cold boot (None: a seat sized by utilisation in an older plan)")
    rolling_restart_headroom_bytes: int | None = Field(None, description="the same, restarted beside its neighbours")


class FixedLaunch(_Launch):
    """A fixed (non-vLLM) seat as compose starts it: its image and command; the engines after it wait on ``health_url``."""

    engine: Literal["fixed"] = "fixed"
    image: str | None
    command: list[str] = Field(default_factory=list)
    port: int | None = None
    health_url: str | None = None


class SeatLaunch(_Launch):
    """What starts one seat's engine: its launch and its environment (values, secrets by reference, files on the host).

    ``launch`` is None where what runs is known but not how it was started (a seat whose engine seatplan did not
    write); the change model then calls a vLLM seat changed and leaves a fixed seat alone."""

    launch: Annotated[VllmLaunch | FixedLaunch, Field(discriminator="engine")] | None
    env: dict[str, str] = Field(default_factory=dict, description="by value (CUDA_VISIBLE_DEVICES among them)")
    env_from_host: dict[str, str] = Field(default_factory=dict, description="the engine's variable → the host variable holding it")
    env_files: list[str] = Field(default_factory=list, description="files on the host the engine reads its environment from, in order")


def model_and_revision(model: str) -> tuple[str, str | None]:
    """A fleet's ``ORG/NAME@REVISION`` as vLLM takes it: ``--model ORG/NAME --revision REVISION`` (EngineArgs.revision);
    an absolute path is a directory on the host, ``@`` and all."""
    if model.startswith("/"):
        return model, None
    name, _, revision = model.partition("@")
    return name, revision or None
