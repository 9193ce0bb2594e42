"""The fleet file: hosts, their GPUs, the seats (engines) to place, and the planning policy.

Every model forbids unknown keys so a typo (``max_model_length``) is an error naming its line,
not a silently ignored setting. ``fleet_file.load_fleet`` reads it with line numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from seatplan.encode import NAME_RULES, address_problem, name_problem
from seatplan.errors import FieldValueError, SeatplanError
from seatplan.units import SIZE_FIX, GiB, MiB, human_bytes, parse_bytes, parse_tokens, round_up
from seatplan.versions import DEFAULT_VLLM_VERSION
from seatplan.versions import modelled as parse_vllm_version

DEFAULT_KV_FACTOR = 1.25  # the operator's rule: KV for 1.25 max-length requests
DEFAULT_ROUNDING_STEP_BYTES = GiB // 2  # KV pins are rounded up to 0.5 GiB

SIZE_PATTERN = r"^\s*(\d+(\.\d+)?|\.\d+)\s*([KMGTkmgt](i?[Bb])?|[Bb])?\s*$"


def _size_to_bytes(value: Any) -> Any:
    """Sizes in the fleet file: ``96GiB``, ``0.5GiB``, ``22G`` or plain bytes (``units.parse_bytes``)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
        return value  # let the type check / the ``ge=0`` bound word the error
    if isinstance(value, str) and value.strip().startswith("-"):
        raise FieldValueError(f"{value!r} is negative; sizes are 0 or more", SIZE_FIX)
    try:
        return parse_bytes(value)
    except SeatplanError as problem:
        raise FieldValueError(problem.message.split(": ", 1)[-1], problem.fix) from None


Bytes = Annotated[
    int,
    BeforeValidator(_size_to_bytes),
    Field(ge=0),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}],
            "description": "bytes, or a size with a unit: 96GiB, 0.5GiB, 512MiB, 22G (2**30), 20GB (10**9)",
        }
    ),
]

GpuRef = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^[^:]+:\d+$"}],
            "description": "a GPU index on the only host, or HOST:INDEX",
        }
    ),
]

_DTYPE_WORD = re.compile(r"[A-Za-z0-9_]{1,40}", re.ASCII)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def checked_name(kind: str, value: str) -> str:
    """A name every consumer takes as written (``encode.NAME_RULES``); anything else is refused with the rule."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise FieldValueError(problem, f"rename it: {NAME_RULES[kind][1]}")
    return value


# nvidia-smi's `uuid` column: GPU- and hex groups (a MIG device's MIG-… is not a GPU seatplan places seats on)
GPU_UUID_PATTERN = r"^GPU-[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$"
# No GPU sold holds a tebibyte (the largest, 2026: under 300 GiB); past this a size is a typo or a hostile reading.
MAX_GPU_BYTES = 1 << 40


class GpuSpec(_Strict):
    """One GPU of a host."""

    index: int = Field(ge=0, description="CUDA device index (what CUDA_VISIBLE_DEVICES names)")
    name: str = Field("", description="model name as nvidia-smi prints it, for the tables")
    total_bytes: Bytes = Field(description="total memory as CUDA reports it (e.g. 95.59GiB on a 96 GB card)")
    reserved_bytes: Bytes = Field(0, description="memory used by processes seatplan does not manage")
    keep_clear: bool = Field(False, description="this GPU must stay empty (nothing is placed on it)")
    beyond_known_sizes: bool = Field(False, description=f"accept a total_bytes over {MAX_GPU_BYTES >> 40} TiB, more than any GPU "
                                     "made has (a typo or a hostile nvidia-smi otherwise)")
    uuid: str | None = Field(None, pattern=GPU_UUID_PATTERN, description="the GPU's UUID as nvidia-smi prints it (`GPU-…`): the Kubernetes "
                             "target's claims select the GPU by it ([kubernetes.md](kubernetes.md)); without it they select by index")

    @model_validator(mode="after")
    def _known_size(self) -> GpuSpec:
        if self.total_bytes > MAX_GPU_BYTES and not self.beyond_known_sizes:
            raise FieldValueError(f"total_bytes {self.total_bytes:,} is over {MAX_GPU_BYTES >> 40} TiB, more than any GPU has "
                                  "(the largest hold under 300 GiB)",
                                  "write the size CUDA reports (nvidia-smi memory.total minus memory.reserved), or set "
                                  "beyond_known_sizes: true on this GPU if it really has that much")
        return self


Device = Literal["cuda", "cpu"]
RestartKind = Literal["compose", "systemd", "script"]


def no_single_quote(what: str, text: str) -> None:
    """The env file carries the engine's command and environment in single quotes, which sh, systemd and
    Compose all end at the next ``'`` with no escape the three share (``encode.env_assignment``)."""
    if "'" in text:
        raise FieldValueError(f"{what} holds a single quote, which the engine's env file cannot carry",
                              "remove the quote (a model path or argument needs none; JSON arguments use double quotes)")


ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
HOST_PATH_PATTERN = r"^/[A-Za-z0-9._/@+-]*$"
UNIT_PATTERN = r"^[A-Za-z0-9:_.\\@-]{1,250}\.service$"
COMPOSE_SERVICE_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$"


class EnvReference(_Strict):
    """A value the fleet file names but never holds: a secret (an `HF_TOKEN`, an engine's `VLLM_API_KEY`) read on
    the GPU host when the engine starts. Render writes the reference (systemd `PassEnvironment=`, compose
    `${NAME}`), and every document and line seatplan prints carries the name only (docs/fleet.md, "Secrets")."""

    from_host_env: str = Field(pattern=ENV_NAME_PATTERN, description="the variable in the host's environment that holds the value")


EnvValue = str | EnvReference


class StartedBy(_Strict):
    """How the seat's engine is started today, outside seatplan: the first `seatplan apply` stops it before it
    starts seatplan's engine (the cut-over) and rollback starts it again. Exactly one kind is given:
    `compose_file` with `compose_service`, `systemd_unit`, or `stop_command` (with `start_command` for rollback)."""

    compose_file: str | None = Field(None, pattern=HOST_PATH_PATTERN, description="the compose file on the host (absolute path)")
    compose_service: str | None = Field(None, pattern=COMPOSE_SERVICE_PATTERN, description="the service in that file that runs the engine")
    systemd_unit: str | None = Field(None, pattern=UNIT_PATTERN, description="the systemd unit that runs the engine (`vllm@qwen3.service`)")
    stop_command: list[str] = Field(default_factory=list, description="the command that stops the engine, as words (no shell)")
    start_command: list[str] = Field(default_factory=list, description="the command that starts it again (rollback), as words (no shell)")

    @model_validator(mode="after")
    def _one_kind(self) -> StartedBy:
        kinds = [name for name, given in (("compose", self.compose_file is not None or self.compose_service is not None),
                                           ("systemd", self.systemd_unit is not None),
                                           ("command", bool(self.stop_command or self.start_command))) if given]
        if len(kinds) != 1:
            raise ValueError("give exactly one of: compose_file with compose_service, systemd_unit, or stop_command "
                             f"(with start_command); this gives {', '.join(kinds) or 'none'}")
        if kinds == ["compose"] and (self.compose_file is None or self.compose_service is None):
            raise ValueError("compose_file and compose_service go together")
        if kinds == ["command"] and not self.stop_command:
            raise ValueError("start_command needs a stop_command (the cut-over stops the engine first)")
        for word in self.stop_command + self.start_command:
            no_single_quote(repr(word), word)
        return self

    @property
    def kind(self) -> Literal["compose", "systemd", "command"]:
        if self.systemd_unit is not None:
            return "systemd"
        return "compose" if self.compose_file is not None else "command"


class GatewayService(_Strict):
    """The seat's engine as the gateway's container reaches it on their compose network: by service name and the
    port vLLM listens on inside the container."""

    service: str = Field(pattern=COMPOSE_SERVICE_PATTERN, description="the compose service that runs the engine, on the gateway's network")
    port: int | None = Field(None, ge=1, le=65535, description="the container port vLLM listens on (default: the seat's `port`)")


class Gateway(_Strict):
    """The LiteLLM gateway in front of the seats, as it runs (written by `seatplan adopt`)."""

    config: str | None = Field(None, pattern=HOST_PATH_PATTERN, description="its config file on the gateway host (absolute path): "
                               "render reads it where it runs there and keeps all of it but the seats' routes (docs/render.md)")


class HostSpec(_Strict):
    name: str = Field(min_length=1, description="host name, a DNS name (letters, digits, `-`, `_` in dot-separated labels); "
                      "GPU references elsewhere are HOST:INDEX, or just INDEX when there is one host")
    gpus: list[GpuSpec] = Field(min_length=1, description="the host's GPUs")
    monitor_names: list[str] = Field(
        default_factory=list, description="the names monitors give this host (a Beszel system, a DCGM `hostname`, an nvidia-smi "
        "`HOST=`), so `seatplan diagnose --plan` checks its GPUs")
    device: Device = Field(
        "cuda",
        description="what the host's engines run on: `cuda` (GPUs) or `cpu` for vLLM's CPU build: the KV block size (128) "
        "and attention backend follow it, so the plan's blocks and tokens are exact there; each `gpus` entry is then a "
        "memory budget and no `CUDA_VISIBLE_DEVICES` is set. A seat that could land on both kinds must be pinned to one",
    )
    address: str | None = Field(None, description="how engines on the host are reached (default: `name`): an IPv4 or IPv6 "
                                "address (`fd00::5`, bracketed in URLs) or a host name; health checks, "
                                "LiteLLM's `api_base`, Prometheus' `instance`, `seatplan verify` ([render.md](render.md))")
    gateway_reaches: str | None = Field(None, description="how the LiteLLM gateway reaches the host's engines, where not at `address`: "
                                        "`host.docker.internal` (the gateway in a container, compose `extra_hosts: host.docker.internal:host-gateway`), "
                                        "`localhost` (the gateway on the host's own network), or another address or name")
    # How the host starts vLLM today (written by `seatplan adopt` from its units, env files and compose services), so the
    # first render starts engines the way the box does; a render flag wins over each (issue 50).
    launcher: list[str] = Field(
        default_factory=list, description="the words before the model that start vLLM on the host, outside a container "
        "(`[/opt/vllm/.venv/bin/vllm, serve]`, or `[PYTHON, -m, vllm.entrypoints.openai.api_server]`): the rendered env "
        "files' command starts with them (systemd and script restarts); default `vllm serve`, `render --launcher` wins")
    image: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$",
        description="the engine image compose runs on the host (`vllm/vllm-openai:v0.11.0`); default `policy.image`, else "
        "the version table's image of `policy.vllm_version`; `render --image` wins")
    restart: RestartKind | None = Field(
        None, description="how the host's engines are restarted: `compose`, `systemd` or `script`; render's `--restart` "
        "when every engine host says the same (else `compose`), `render --restart` wins")

    @field_validator("name")
    @classmethod
    def _host_name(cls, value: str) -> str:
        return checked_name("host name", value)

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, value: list[str]) -> list[str]:
        if not value:
            return value
        for word in value:
            no_single_quote(repr(word), word)
            if not word or any(char.isspace() for char in word):
                raise FieldValueError(f"launcher word {word!r} is empty or holds a space", "give the launcher as words: [/opt/vllm/bin/vllm, serve]")
        # what every reader of an engine command takes for vLLM's server (engine.parse.LAUNCHER_ENDS), so adopt, diff and
        # `plan --current` read the rendered command back
        if not (value[-1] == "serve" and value[-2:-1] and value[-2].rsplit("/", 1)[-1] == "vllm") and value[-2:] != ["-m", "vllm.entrypoints.openai.api_server"]:
            raise FieldValueError(f"launcher {' '.join(value)!r} does not end in `vllm serve` or `-m vllm.entrypoints.openai.api_server`",
                                  "give the words that start vLLM's server, up to the model: [/opt/vllm/bin/vllm, serve]")
        return value

    @field_validator("address", "gateway_reaches")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = address_problem(value) if value is not None else None
        if problem is not None:
            raise FieldValueError(problem, "give the host's IP address or DNS name (engines, health checks and Prometheus reach it there)")
        return value

    @property
    def reachable_at(self) -> str:
        return self.address or self.name


class SpeculativeSpec(_Strict):
    """A seat's speculative decoding, as vLLM's `--speculative-config` takes it (the plan writes that flag)."""

    method: Literal["draft_model", "eagle", "eagle3", "mtp", "ngram", "ngram_gpu", "suffix"] | None = Field(
        None, description="vLLM's method; unset: vLLM's inference (`ngram` for the model `ngram`, else a draft model)")
    model: str | None = Field(None, description="the draft model or EAGLE head: a directory (relative to the fleet file) or "
                              "Hugging Face id, read like `model`; none for ngram, suffix and mtp")
    model_path_on_host: str | None = Field(None, description="what the engine is given as the draft on the GPU host, when it differs from `model`")
    num_speculative_tokens: int = Field(ge=1, description="tokens proposed per step")
    draft_tensor_parallel_size: int | None = Field(None, ge=1, description="1 or the seat's tensor_parallel_size (vLLM's default)")

    @field_validator("model", "model_path_on_host")
    @classmethod
    def _words(cls, value: str | None) -> str | None:
        if value is not None:
            no_single_quote(repr(value), value)
        return value


class LoraAdapter(_Strict):
    """One adapter the engine serves (`--lora-modules NAME=PATH`)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$", description="the name clients ask for")
    path: str = Field(min_length=1, description="the adapter's directory on the GPU host (or a Hugging Face id)")

    @field_validator("path")
    @classmethod
    def _words(cls, value: str) -> str:
        no_single_quote(repr(value), value)
        return value


class LoraSpec(_Strict):
    """A seat's LoRA adapters (`--enable-lora`): vLLM allocates `max_loras` slots of `max_lora_rank` on the GPU at load,
    for every module it wraps, whatever adapters are loaded."""

    max_loras: int = Field(1, ge=1, description="adapters on the GPU at once (`--max-loras`, vLLM's default 1)")
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = Field(16, description="`--max-lora-rank`: the ranks vLLM 0.32 takes (vllm/config/lora.py:26), default 16")
    max_cpu_loras: int | None = Field(None, ge=1, description="`--max-cpu-loras`: adapters cached in host memory (not the GPU's)")
    adapters: list[LoraAdapter] = Field(default_factory=list, description="adapters to serve from the start (`--lora-modules`)")
    target_modules: list[str] | None = Field(None, description="`--lora-target-modules`; unset: every module vLLM wraps")
    lora_dtype: str = Field("auto", description="`--lora-dtype`; auto: the model's dtype")


class SeatSpec(_Strict):
    """One engine ("seat"): a vLLM server, or a fixed non-vLLM process with a known memory cap."""

    name: str = Field(min_length=1, description="seat name (1 to 63 letters, digits, `.`, `_`, `-`, starting with a letter or digit)")
    engine: Literal["vllm", "fixed"] = Field("vllm", description="`vllm`, or `fixed` for a non-vLLM process with a known memory cap")
    model: str | None = Field(None, description="model directory (relative to the fleet file) or Hugging Face id ORG/NAME[@REVISION], read from the Hub without its weights")
    model_path_on_host: str | None = Field(
        None, description="what --model says on the GPU host, when it differs from `model` (defaults to `model`)"
    )
    served_model_name: str | None = Field(None, description="the name clients and LiteLLM use (defaults to `name`; letters, digits and "
                                         "`. _ : / @ + -`); usage data are matched on it")
    port: int | None = Field(None, ge=1, le=65535, description="`--port`; every vllm seat needs one (`seatplan plan` refuses a seat without), two seats may not share one")
    dtype: str = Field("auto", description="vLLM's `--dtype`")
    kv_cache_dtype: str = Field("auto", description="vLLM's `--kv-cache-dtype`; `fp8` halves the KV bytes of a 16-bit model")
    tensor_parallel_size: int = Field(1, ge=1, description="a power of two, at most the GPUs of one host")
    max_model_len: Annotated[
        int | Literal["published", "fit"] | None,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[kKmM]?\s*$"},
                    {"const": "published"},
                    {"const": "fit"},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(
        None,
        description="context length in tokens, `published` to raise it to the model's published maximum, or `fit` for "
        "the longest context the pinned `kv_cache_memory_bytes` holds; unset = the length vLLM derives from the config",
    )
    kv_factor: float | None = Field(
        None, gt=0, description=f"KV bytes = one max-length request × this factor, rounded up to `policy.rounding_step_bytes` (policy default {DEFAULT_KV_FACTOR:g})"
    )
    kv_cache_memory_bytes: Bytes | None = Field(None, description="an operator's pinned KV size; wins over `kv_factor` (the plan shows what the rule would give)")
    max_new_tokens: int | None = Field(
        None, ge=1, description="default output cap, emitted as `--override-generation-config '{\"max_new_tokens\": N}'` "
        "(a ceiling too since vLLM 0.17); with `--usage` and no cap, a cap is proposed from the completion tail")
    max_num_seqs: int | None = Field(
        None, ge=1, description="passed to vLLM explicitly (default: vLLM's server default for the GPU size); the activation estimate depends on it")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="passed to vLLM explicitly (default: vLLM's server default for the GPU size); the activation estimate depends on it")
    enforce_eager: bool = Field(False, description="no CUDA graphs (their memory drops out of the footprint; costs speed)")
    pin: GpuRef | list[GpuRef] | None = Field(None, description="GPU (or list of GPUs, one per tensor-parallel rank) this seat must run on")
    avoid: list[GpuRef] = Field(default_factory=list, description="GPUs this seat must not run on")
    allow_yarn: bool = Field(False, description="YaRN context extension may be switched on for this seat (static YaRN costs "
                             "quality on short prompts; the plan always shows what it would cost)")
    memory_cap_bytes: Bytes | None = Field(None, description="a fixed seat's declared memory per GPU")
    image: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$",
        description="a fixed seat's container image: compose then runs it, first in boot order (else it is listed as not managed)",
    )
    command: list[str] = Field(default_factory=list, description="a fixed seat's container command (with `image`), as words, no shell")
    health_url: str | None = Field(
        None, pattern=r"^https?://[^\s'\"`$\\]+$",
        description="a fixed seat's health URL: the engines booted after it wait until it answers 200",
    )
    lora: LoraSpec | None = Field(None, description="LoRA adapters (`--enable-lora`): their GPU slots are counted in the seat's weights")
    speculative: SpeculativeSpec | None = Field(None, description="speculative decoding (`--speculative-config`): a draft model's "
                                                "weights and KV layers are counted with the seat's; ngram and suffix add none")
    extra_args: list[str] = Field(default_factory=list, description="extra vLLM arguments, appended as given; a flag that changes the "
                                  "memory and that seatplan does not model (`--enable-expert-parallel`, `--pipeline-parallel-size`, `--kv-transfer-config` …) "
                                  "is refused at its line with its fix (docs/fleet.md, \"extra_args\")")
    env: dict[str, EnvValue] = Field(default_factory=dict, description="extra environment for the engine (the plan sets CUDA_VISIBLE_DEVICES); "
                                     "keys are POSIX names, values hold no single quote or control character; a secret is given by "
                                     "reference, `{from_host_env: NAME}`, never by value (docs/fleet.md, \"Secrets\")")
    env_files: list[Annotated[str, Field(pattern=HOST_PATH_PATTERN)]] = Field(
        default_factory=list, description="files on the GPU host (absolute paths, root-only) whose `KEY=value` lines the engine "
        "reads at start: secrets stay on the host; render writes `EnvironmentFile=` / compose `env_file:`")
    started_by: StartedBy | None = Field(None, description="how the engine is started today outside seatplan (written by "
                                         "`seatplan adopt`): the first apply stops it before starting seatplan's engine")
    gateway_reaches: GatewayService | None = Field(None, description="the gateway reaches this engine as a compose service on its "
                                                   "network (`{service: vllm-qwen, port: 8000}`), not at its host's address")

    @field_validator("name")
    @classmethod
    def _seat_name(cls, value: str) -> str:
        return checked_name("seat name", value)

    @field_validator("served_model_name")
    @classmethod
    def _served_name(cls, value: str | None) -> str | None:
        return checked_name("served name", value) if value is not None else None

    @field_validator("env")
    @classmethod
    def _env_keys(cls, value: dict[str, EnvValue]) -> dict[str, EnvValue]:
        for key, text in value.items():
            checked_name("env key", key)
            if isinstance(text, str):
                no_single_quote(f"the value of {key}", text)
        return value

    @property
    def env_values(self) -> dict[str, str]:
        """The environment given by value (written into the engine's env file)."""
        return {key: value for key, value in self.env.items() if isinstance(value, str)}

    @property
    def env_from_host(self) -> dict[str, str]:
        """The environment given by reference: the engine's variable → the host's variable that holds it."""
        return {key: value.from_host_env for key, value in self.env.items() if isinstance(value, EnvReference)}

    @field_validator("dtype", "kv_cache_dtype")
    @classmethod
    def _dtype_word(cls, value: str) -> str:
        # vLLM's dtype names are one word of letters, digits and '_' in every release (vLLM 0.32
        # vllm/config/cache.py:39 CacheDType, vllm/config/model.py:99 ModelDType); a shape, not a list, so a
        # release's new names pass and the plan's own dtype rule names the unknown ones.
        if not _DTYPE_WORD.fullmatch(value):
            raise ValueError(f"{value[:40]!r} is no dtype name: one word of letters, digits and '_' (auto, bfloat16, fp8, fp8_e4m3)")
        return value

    @field_validator("model", "model_path_on_host", "extra_args")
    @classmethod
    def _command_words(cls, value: str | list[str] | None) -> str | list[str] | None:
        for text in [value] if isinstance(value, str) else value or []:
            no_single_quote(repr(text), text)
        return value

    @field_validator("max_model_len", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("published", "fit"):
            if not re.fullmatch(r"\s*\d+(\.\d+)?\s*[kKmM]?\s*", value):
                raise ValueError(f"{value!r} is neither a token count (131072, 128K) nor `published` nor `fit`")
            value = parse_tokens(value)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"{value} tokens: vLLM needs a context of at least one token (leave it unset for the model's own)")
        return value


DEFAULT_MOVE_COST_BYTES = GiB


@dataclass(frozen=True)
class KvPin:
    """A seat's KV bytes (``--kv-cache-memory-bytes``), decided once by :meth:`Policy.kv_pin` for plan, explain and
    diagnose: the operator's pin when the seat has one, else the KV rule; the rule's figure and arithmetic either way."""

    kv_cache_memory_bytes: int
    source: Literal["operator", "rule"]
    rule_bytes: int
    request_kv_bytes: int = 0  # one max-length request
    min_kv_cache_bytes: int = 0  # the smallest pin vLLM boots with at that length
    factor: float = DEFAULT_KV_FACTOR
    factor_source: Literal["seat", "policy"] = "policy"
    rounding_step_bytes: int = 0

    @property
    def holds_one_request(self) -> bool:
        """vLLM starts with it (an operator's pin may be too small; the rule never is)."""
        return self.kv_cache_memory_bytes >= self.min_kv_cache_bytes

    def arithmetic(self) -> str:
        """The rule's arithmetic, each step stated where it changes the figure, so that it gives ``rule_bytes``."""
        product = math.ceil(self.request_kv_bytes * self.factor)
        text = f"{self.request_kv_bytes:,} B × {self.factor:g} = {product:,} B"
        if self.min_kv_cache_bytes > product:
            text += f", below vLLM's minimum {self.min_kv_cache_bytes:,} B"
        if self.rounding_step_bytes and self.rule_bytes != max(product, self.min_kv_cache_bytes):
            text += f", rounded up to {human_bytes(self.rounding_step_bytes)}"
        return text + (f" = {self.rule_bytes:,} B" if self.rule_bytes != product else "")


class Policy(_Strict):
    kv_factor: float = Field(DEFAULT_KV_FACTOR, gt=0, description="default KV factor over one max-length request")
    rounding_step_bytes: Bytes = Field(DEFAULT_ROUNDING_STEP_BYTES, description="KV bytes are rounded up to a multiple of this")
    headroom_bytes: Bytes = Field(0, description="memory each GPU must keep free at plateau")
    creep_allowance_bytes: Bytes = Field(
        512 * MiB, description="per seat and GPU: growth after boot (fragmentation, caches) seen at plateau"
    )
    boot_margin_bytes: Bytes = Field(
        512 * MiB, description="with the KV cache pinned (vLLM 0.10.2+), added to what an engine allocates in its "
        "`--gpu-memory-utilization` request, so vLLM refuses a start that leaves less free (the margin and the rounding at most "
        "1 GiB); unused before 0.10.2, where the request is the engine's budget"
    )
    vllm_version: str = Field(DEFAULT_VLLM_VERSION, description="the vLLM version the engines run (0.8 to 0.32): keys the estimates and flags")
    image: str | None = Field(
        None, description="the engine image compose runs; default: the vllm/vllm-openai tag of vllm_version in the version table"
    )
    output_cap_margin: float = Field(1.25, ge=1.0, description="a proposed cap is at least p99 completion × this")
    # A move restarts an engine elsewhere. 1 GiB of worst-case spare per move is two seats' creep allowance: a move
    # that buys less (76 MiB swaps were seen) is not worth a restart; a move the fleet needs to fit is always taken,
    # since a layout that does not fit is no choice (docs/plan.md, "Moves").
    move_cost_bytes: Bytes = Field(
        DEFAULT_MOVE_COST_BYTES, description="a seat moves from where it runs only where the move buys at least this much worst-case spare"
    )

    def rule_kv_bytes(self, request_kv_bytes: int, min_kv_cache_bytes: int, factor: float | None = None) -> int:
        """The KV rule, the one place it is written: one max-length request × the factor, never below what
        vLLM boots with, rounded up to the policy's step."""
        raw = max(math.ceil(request_kv_bytes * (factor or self.kv_factor)), min_kv_cache_bytes)
        return round_up(raw, self.rounding_step_bytes) if self.rounding_step_bytes else raw

    def kv_pin(self, seat: SeatSpec, request_kv_bytes: int, min_kv_cache_bytes: int) -> KvPin:
        """A seat's KV bytes, the one place they are decided: the operator's pin (``kv_cache_memory_bytes``) wins
        over the rule, whose figure is kept beside it. ``holds_one_request`` false: vLLM would refuse the pin."""
        factor = seat.kv_factor or self.kv_factor
        rule_bytes = self.rule_kv_bytes(request_kv_bytes, min_kv_cache_bytes, factor)
        pinned = seat.kv_cache_memory_bytes
        return KvPin(
            kv_cache_memory_bytes=rule_bytes if pinned is None else pinned, source="rule" if pinned is None else "operator",
            rule_bytes=rule_bytes, request_kv_bytes=request_kv_bytes, min_kv_cache_bytes=min_kv_cache_bytes, factor=factor,
            factor_source="seat" if seat.kv_factor else "policy", rounding_step_bytes=self.rounding_step_bytes,
        )

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        parse_vllm_version(value)
        return value


class Fleet(_Strict):
    hosts: list[HostSpec] = Field(min_length=1, description="the machines and their GPUs")
    seats: list[SeatSpec] = Field(min_length=1, description="the engines to place")
    policy: Policy = Field(default_factory=Policy, description="the rules every seat follows unless it says otherwise")
    current_layout: dict[str, GpuRef | list[GpuRef]] = Field(
        default_factory=dict, description="where each seat runs now (seat name → GPU or GPUs)"
    )
    gateway: Gateway | None = Field(None, description="the LiteLLM gateway as it runs: where its config is")
