"""The plan's vLLM seats as engines to deliver: where each runs, how it is reached, and its two commands (the seat's one
launch written for apply's restart, with ``--bind``, and for compose's cold boot, listening on every interface)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from seatplan.documents.fleet import HOST_PATH_PATTERN
from seatplan.documents.launch import VllmLaunch
from seatplan.documents.plan import Plan, PlannedFixedSeat, PlannedSeat, PlannedVllmSeat
from seatplan.encode import address_problem, check_name, control_character
from seatplan.engine.command import check_flags, engine_command
from seatplan.engine.endpoint import base_url, health_url, instance_label, local_address
from seatplan.errors import SeatplanError
from seatplan.render.settings import RenderSettings, container_launcher, host_launcher
from seatplan.versions import image_for, try_release


def gpu_indices(seat: PlannedSeat) -> list[str]:
    """The seat's GPU indices on its host, as CUDA and compose's device_ids name them."""
    return [label.rsplit(":", 1)[1] for label in seat.gpus]


@dataclass(frozen=True)
class Engine:
    seat: PlannedVllmSeat
    host: str
    address: str
    port: int
    # Started by apply, one engine at a time beside neighbours running at plateau.
    restart_args: list[str]
    # Started by compose, the whole host cold in boot order.
    boot_args: list[str]
    # --bind: the one address it listens on (None: every interface)
    bind_host: str | None = None
    # the fleet's gateway_reaches: where the gateway reaches it (None: at address and port)
    gateway_address: str | None = None
    gateway_port: int | None = None
    # the image compose runs it from (engine_image); None where none is known, which only compose's files need
    image: str | None = None

    @property
    def name(self) -> str:
        return self.seat.name

    @property
    def launch(self) -> VllmLaunch:
        assert self.seat.launch is not None  # plan_engines takes placed seats with a launch only
        return self.seat.launch

    @property
    def base_url(self) -> str:
        return base_url(self.address, self.port)

    @property
    def gateway_base_url(self) -> str:
        """The engine as the gateway reaches it (its LiteLLM ``api_base`` without ``/v1``): the fleet's gateway_reaches
        (host.docker.internal, a compose service and its container port, localhost), else its address."""
        return base_url(self.gateway_address or self.address, self.gateway_port or self.port)

    @property
    def health_url(self) -> str:
        """Asked on the engine's own host (apply waits there), so at the address the engine is bound to."""
        return health_url(local_address(self.address, self.bind_host), self.port)

    @property
    def instance(self) -> str:
        """Prometheus' ``instance`` label of the engine's static scrape target."""
        return instance_label(self.address, self.port)

    @property
    def gpu_indices(self) -> list[str]:
        return gpu_indices(self.seat)


@dataclass(frozen=True)
class FixedSeat:
    """A placed fixed (non-vLLM) seat: compose runs it where the plan gives an image; else it is not managed."""

    seat: PlannedFixedSeat
    host: str

    @property
    def name(self) -> str:
        return self.seat.name

    @property
    def managed(self) -> bool:
        return self.seat.image is not None

    @property
    def gpu_indices(self) -> list[str]:
        return gpu_indices(self.seat)


def fixed_seats(plan: Plan) -> list[FixedSeat]:
    """The placed fixed seats in boot order (they boot before every engine)."""
    return [
        FixedSeat(seat=seat, host=seat.host or seat.gpus[0].rsplit(":", 1)[0])
        for seat in sorted(plan.seats, key=lambda seat: seat.boot_order)
        if isinstance(seat, PlannedFixedSeat) and seat.gpus
    ]


def check_names(seat: PlannedSeat, host: str) -> None:
    """The fleet loader's name rules, again on the plan: a plan edited by hand (or by a tool) reaches every
    consumer below, so render refuses what the fleet file could not have held."""
    where = f"seat {seat.name!r}" if not control_character(seat.name) else "a seat"
    check_name("seat name", seat.name, where)
    check_name("host name", host, f"{where}, host")
    check_name("served name", seat.served_model_name, f"{where}, served_model_name")
    for key in seat.env:
        check_name("env key", key, f"{where}, env")
    for key, source in seat.env_from_host.items():
        check_name("env key", key, f"{where}, env_from_host")
        check_name("env key", source, f"{where}, env_from_host")
    for path in seat.env_files:
        if not re.fullmatch(HOST_PATH_PATTERN, path) or "/../" in path + "/":
            raise SeatplanError(f"env file {path!r} is not an absolute path of letters, digits and `._/@+-`", where=f"{where}, env_files",
                                fix="name the file on the host by its absolute path in the fleet file and re-plan")
    problem = address_problem(seat.address) if seat.address else None
    if problem is not None:
        raise SeatplanError(problem, where=f"{where}, address", fix="give the host's IP address or DNS name in the fleet file and re-plan")


# vLLM takes its API key from --api-key or this variable (vllm/entrypoints/openai/cli_args.py, `api_key`, and
# api_server.py's `args.api_key or envs.VLLM_API_KEY`): given by reference it stays off the command line.
ENGINE_KEY_VARIABLE = "VLLM_API_KEY"


def keyed(seat: PlannedVllmSeat, engine_key_env: str | None) -> PlannedVllmSeat:
    """``--engine-key-env NAME``: an engine without a key of its own reads it from NAME, the one reference the gateway's
    ``api_key: os.environ/NAME`` names too (an engine key and the gateway's key for it are one variable)."""
    if engine_key_env is None or ENGINE_KEY_VARIABLE in seat.env or ENGINE_KEY_VARIABLE in seat.env_from_host:
        return seat
    return seat.model_copy(update={"env_from_host": {**seat.env_from_host, ENGINE_KEY_VARIABLE: engine_key_env}})


def plan_engines(plan: Plan, settings: RenderSettings) -> list[Engine]:
    """Every placed vLLM seat, in boot order; a plan that cannot be delivered is an error naming the seat."""
    if plan.worst_case_spare_bytes is None:
        raise SeatplanError("the plan places no seats (it did not fit)", fix="fix the fleet until `seatplan plan` finds a layout, then render that plan")
    engines = []
    for planned in sorted(plan.vllm_seats(), key=lambda seat: seat.boot_order):
        seat = keyed(planned, settings.engine_key_env)
        if not seat.gpus or seat.launch is None:
            raise SeatplanError(
                f"seat {seat.name} has no placement or engine settings", where=f"seat {seat.name}", fix="re-plan with this seatplan (`seatplan plan FLEET -o plan.json`)"
            )
        if seat.port is None:
            raise SeatplanError(
                f"seat {seat.name} has no port; health checks, the gateway and verify need one",
                where=f"seat {seat.name}, port",
                fix="give every seat its own port in the fleet file and re-plan",
            )
        host = seat.host or seat.gpus[0].rsplit(":", 1)[0]
        check_names(seat, host)
        # one launch, one utilisation: apply's restart and compose's cold boot start the same engine
        restart_args = engine_command(seat.launch, host_launcher(settings, plan, host), bind_host=settings.bind_host)
        check_flags(seat.name, restart_args, plan.inputs.vllm_version)
        boot_args = engine_command(seat.launch, container_launcher(settings))  # in a container the engine listens on every interface
        engines.append(Engine(seat=seat, host=host, address=seat.address or host, port=seat.port, restart_args=restart_args, boot_args=boot_args,
                              bind_host=settings.bind_host, gateway_address=seat.gateway_address, gateway_port=seat.gateway_port,
                              image=engine_image(plan, settings, host)))
    taken: dict[tuple[str, int], str] = {}
    for engine in engines:
        other = taken.setdefault((engine.host, engine.port), engine.name)
        if other != engine.name:
            raise SeatplanError(
                f"seats {other} and {engine.name} both use port {engine.port} on host {engine.host}",
                where=f"seat {engine.name}, port",
                fix="give each seat on a host its own port and re-plan",
            )
    return engines


def engine_image(plan: Plan, settings: RenderSettings, host: str) -> str | None:
    """The image compose runs the host's engines from: ``--image``, else the host's own (``hosts[].image``, what adopt
    read off its compose services), else the fleet's ``policy.image``, else the image of the plan's vLLM version: never
    ``latest``, whose numbers may not be the plan's. None where none is known."""
    planned = plan.hosts.get(host)
    version = try_release(plan.inputs.vllm_version)
    return settings.image or (planned.image if planned is not None else None) or plan.image or (image_for(version) if version else None)
