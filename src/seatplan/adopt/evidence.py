"""What adopt read, each value with the place it came from: the readers fill these, ``assemble`` turns them into a fleet.

Pure data. Every string here came from a file or an engine and is untrusted until the fleet loader accepted it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Device = Literal["cuda", "cpu"]
APPS_QUERY = "pid,process_name,gpu_uuid,used_memory"  # nvidia-smi --query-compute-apps=...: the processes on each GPU


@dataclass(frozen=True)
class GpuReading:
    """One GPU as nvidia-smi listed it."""

    host: str | None  # None: the CSV did not say (``--nvidia-smi HOST=CSV`` names it)
    index: int
    name: str
    uuid: str
    total_mib: int
    reserved_mib: int | None  # None when the query had no memory.reserved column
    source: str  # FILE:LINE or "nvidia-smi on this host"
    used_mib: int | None = None  # memory.used, where the query has that column

    @property
    def cuda_total_bytes(self) -> int:
        """memory.total less the driver's reserved area, which nvidia-smi counts in its total (total = reserved +
        used + free) and CUDA's total leaves out; an estimate of CUDA's figure, labelled so in docs/adopt.md."""
        return (self.total_mib - (self.reserved_mib or 0)) * 2**20


@dataclass
class Launch:
    """How one file starts one engine: an env file of a directory, or a compose service."""

    source: str  # FILE or FILE:LINE
    seat: str | None  # SEATPLAN_SEAT, the compose service, or the env file's stem
    args: list[str]  # the engine's arguments, launcher removed (``MODEL --port 8001 ...`` or ``--model MODEL ...``)
    env: dict[str, str] = field(default_factory=dict)  # the engine's other environment
    gpus: list[str] | None = None  # CUDA_VISIBLE_DEVICES / device_ids as written (indices or UUIDs)
    gpus_source: str = ""
    host: str | None = None  # seatplan's own env-file comment (``... on HOST GPU 0; ...``) or ``--env-dir HOST=DIR``
    host_note: str = ""
    device: Device | None = None
    health_url: str | None = None
    health_note: str = ""  # where health_url came from (a compose healthcheck, the comment render wrote)
    health_left_out: str = ""  # why a compose healthcheck gave no health_url ("" : there was none to read)
    health_refused: bool = False  # it named a URL, and the fleet loader's rule refuses it (a warning, not just a comment)
    published_port: int | None = None  # compose ``ports: ["HOST:CONTAINER"]``: how the engine is reached
    port_unknown: str = ""  # why the host port is not in the file (compose picks it), "" where it is
    fixed: bool = False  # a compose service that uses GPUs and starts no vLLM engine (speech, TTS): a fixed seat
    image: str | None = None  # a fixed seat's compose image
    image_left_out: str = ""  # what seatplan's compose file would drop of the service if it ran the image ("" : nothing)
    gpu_evidence: str = ""  # a fixed seat: what says it uses GPUs (device reservation, runtime, environment)
    started_by: dict[str, str] | None = None  # how it is started today (documents.fleet.StartedBy's keys), for the cut-over
    started_note: str = ""  # where that came from, or why it is not known
    env_notes: dict[str, str] = field(default_factory=dict)  # env key → the file it came from, where not ``source``
    warnings: list[str] = field(default_factory=list)  # what the reader left out or could not tell, each located
    config_note: str = ""  # the vLLM --config file read into args, where there was one
    # a secret flag's value named by a variable as written (`--api-key ${VLLM_LOCAL_KEY}`): the variable vLLM reads → that one
    secret_refs: dict[str, str] = field(default_factory=dict)
    launcher: list[str] | None = None  # the words before the engine's arguments, where it runs on the host (a unit, an env file)
    launcher_note: str = ""
    engine_image: str | None = None  # the image a compose service or `docker run` runs vLLM from
    engine_image_note: str = ""


@dataclass(frozen=True)
class ComputeApp:
    """One process on a GPU, as ``nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory`` lists it."""

    pid: int
    process_name: str
    gpu_uuid: str
    used_mib: int | None  # None where nvidia-smi prints [N/A] (a process it cannot see into)
    source: str  # FILE:LINE


@dataclass(frozen=True)
class Route:
    """One ``model_list`` entry of the LiteLLM config."""

    model_name: str  # what clients ask the gateway for
    backend_name: str | None  # litellm_params.model without its provider prefix: what the engine serves
    base_url: str | None  # api_base without /v1; None when it was not a plain URL
    max_tokens: int | None
    source: str  # FILE:LINE
    had_credentials: bool = False  # api_base carried a user or password, dropped before anything printed or stored it
    key_env: str | None = None  # api_key: os.environ/NAME: the variable the gateway sends the engine's key from
    hosted: bool = False  # no api_base at all: the provider's own API (openai/gpt-4o), no engine of this fleet


@dataclass
class EngineSeen:
    """What one engine answered over HTTP."""

    base_url: str
    source: str  # why it was asked: "--engine" or the LiteLLM config's FILE:LINE
    models: list[dict[str, object]] = field(default_factory=list)  # /v1/models cards: id, root, max_model_len
    version: str | None = None
    cache_labels: dict[str, str] | None = None  # vllm:cache_config_info
    problems: list[str] = field(default_factory=list)
