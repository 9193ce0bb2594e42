"""Models on the Hugging Face Hub (or a Hub-compatible mirror), read without downloading weights.

``ORG/NAME[@REVISION]`` resolves to a commit through ``huggingface_hub`` (``HF_ENDPOINT``, ``HF_TOKEN`` /
``HF_TOKEN_PATH``, ``HF_HUB_OFFLINE`` and the Hub cache all as users set them), its config files are read whole
(each at most ``reader.MAX_JSON_BYTES``), and each safetensors file contributes only its header, by HTTP range reads: the
first 100,000 bytes (as ``huggingface_hub.get_safetensors_metadata`` and hf-mem do; most headers fit), then
the rest of the header when it is longer. With a shard index, the files are the index's ``weight_map``; else
the repository's top-level ``*.safetensors`` (vLLM's own choice, ``weight_utils.filter_duplicate_safetensors_files``).

The result is a *facts directory* per commit under ``$XDG_CACHE_HOME/seatplan/hub-headers`` (default
``~/.cache/seatplan``): the config files, and each safetensors file as a sparse copy of its own size that holds
the real header and a hole where the tensors are (no disk blocks). The facts stage then reads it exactly as a
local checkout, with the one header parser (``weights.read_safetensors_header``), so the Hub gives the same
facts as the directory, to the byte. The copies are not a loadable model and live outside the Hub cache, where
no engine looks. A commit never changes, so a second run reads the facts directory with no network, once it has
checked the directory against the sizes and hashes its record holds (a damaged one is read again).

A Hub is a server seatplan does not control: every request goes through ``seatplan.bounded_http`` (huggingface_hub's
client factory is a client on its transport: one deadline from connect to last byte, ``HF_HUB_DOWNLOAD_TIMEOUT``
seconds when set, else 30; an answer cap; no proxy from the environment; ``Authorization`` dropped on a redirect to
another host), and nothing it says becomes a path unless it passes a strict check: the commit is 40 hex digits,
shard names are plain file names (``SAFE_FILE_NAME``), a revision remembered in ``refs/`` is plain path parts.
Nothing goes through ``hf_hub_download``, whose blob names come from the server's ETag.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import HfApi, constants, get_hf_file_metadata, get_session, hf_hub_url, set_client_factory
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from seatplan.bounded_http import BoundedTransport
from seatplan.errors import SeatplanError
from seatplan.facts import reader, weights
from seatplan.facts.hub_record import CACHED_COMMIT, RECORD
from seatplan.hub_names import parse_hub_id
from seatplan.jsontext import loads_bounded
from seatplan.secrets import redact_dsn
from seatplan.units import whole_number

PROBE_BYTES = 100_000  # huggingface_hub's and hf-mem's first read: 97% of headers fit (huggingface_hub PR 1855)
TIMEOUT_S = 30.0
_COMMIT = re.compile(r"[0-9a-f]{40}")
# A shard name the Hub gives that becomes a file name here: one plain path part, no dot first, no control character.
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_REF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
# model_info of a repository with thousands of files is a few MB; a safetensors header may be 100 MiB (its format's limit)
MAX_ANSWER_BYTES = weights.MAX_HEADER_BYTES + (28 << 20)
MAX_FILE_BYTES = 1 << 50  # a safetensors size beyond any disk is a server's mistake, not a file


def hub_timeout_s() -> float:
    """Each Hub request's deadline: ``HF_HUB_DOWNLOAD_TIMEOUT`` when the user set it, else ``TIMEOUT_S``."""
    return float(constants.HF_HUB_DOWNLOAD_TIMEOUT) if "HF_HUB_DOWNLOAD_TIMEOUT" in os.environ else TIMEOUT_S


def _offline_hook(request: httpx2.Request) -> None:
    """huggingface_hub's own rule for its client: no request at all while HF_HUB_OFFLINE is set."""
    if constants.is_offline_mode():
        raise OfflineModeIsEnabled(f"cannot reach {request.url.host}: HF_HUB_OFFLINE is set")


def bounded_hub_client() -> httpx2.Client:
    """huggingface_hub's client, on seatplan's bounded transport (its client factory, ``set_client_factory``):
    redirects followed as the Hub's CDN needs, httpx2 dropping ``Authorization`` when one leaves the origin."""
    return httpx2.Client(transport=BoundedTransport(hub_timeout_s(), MAX_ANSWER_BYTES), follow_redirects=True, timeout=None,
                         trust_env=False, event_hooks={"request": [_offline_hook]})


_installed: list[float] = []


def _install_client() -> None:
    """Every request of huggingface_hub in this process through :func:`bounded_hub_client` (once per deadline)."""
    if _installed != [hub_timeout_s()]:
        set_client_factory(bounded_hub_client)
        _installed[:] = [hub_timeout_s()]


def endpoint() -> str:
    """The Hub's address as it may be printed or stored: a password in HF_ENDPOINT hidden."""
    return redact_dsn(constants.ENDPOINT)


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str
    commit: str
    directory: Path  # the facts directory (or the Hub cache's snapshot, offline with no header cache)


def header_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "seatplan" / "hub-headers"


def _repo_dir(repo_id: str) -> Path:
    return header_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def _facts_dir(repo_id: str, commit: str) -> Path:
    return _repo_dir(repo_id) / commit


def _plain_ref(revision: str) -> bool:
    """A revision that may name a file under ``refs/``: plain path parts (``main``, ``pr/1``), none ``..``."""
    parts = revision.split("/")
    return len(revision) <= 200 and all(_REF_PART.fullmatch(part) and part not in (".", "..") for part in parts)


def _remember_ref(repo_id: str, revision: str, commit: str) -> None:
    """``refs/REVISION`` → commit, as the Hub cache keeps it, so an offline run knows what ``main`` was; a revision
    that is no plain path is not remembered (offline, it is asked by commit)."""
    if revision == commit or not _plain_ref(revision):
        return
    ref = _repo_dir(repo_id) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    temporary = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
    temporary.write_text(commit, encoding="utf-8")
    temporary.replace(ref)


def fetch_model(model: str, fact_files: tuple[str, ...]) -> HubModel:
    """The facts directory of ``ORG/NAME[@REVISION]``: from the header cache when that commit was read before,
    else from the Hub; offline (``HF_HUB_OFFLINE``, or the Hub out of reach) from the caches alone."""
    parsed = parse_hub_id(model)
    if parsed is None:
        raise SeatplanError(f"{model!r} is not a Hugging Face id", where=model, fix="write ORG/NAME or ORG/NAME@REVISION")
    repo_id, revision = parsed
    if constants.is_offline_mode():
        return _from_caches(repo_id, revision, "HF_HUB_OFFLINE is set")
    _install_client()
    try:
        commit, files = _resolve(repo_id, revision)
    except (httpx2.TransportError, OfflineModeIsEnabled) as problem:
        return _from_caches(repo_id, revision, f"the Hub at {endpoint()} cannot be reached ({_said(problem)})")
    except httpx2.HTTPError as problem:  # an answer over the cap, a redirect loop
        raise SeatplanError(f"the Hub's answer about {repo_id}@{revision} cannot be read ({_said(problem)})",
                            where=f"{endpoint()}/api/models/{repo_id}", fix=_MIRROR_FIX) from None
    directory = _facts_dir(repo_id, commit)
    if not _intact(directory):
        _discard(directory)
        try:
            _download_facts(repo_id, revision, commit, files, fact_files, directory)
        except (httpx2.TransportError, OfflineModeIsEnabled) as problem:
            raise SeatplanError(f"lost the Hub at {endpoint()} while reading {repo_id}@{commit[:12]} ({_said(problem)})",
                                where=f"{endpoint()}/{repo_id}", fix="run it again; nothing half-read was kept") from None
        except httpx2.HTTPError as problem:
            raise SeatplanError(f"the Hub's answer for a file of {repo_id}@{commit[:12]} cannot be read ({_said(problem)})",
                                where=f"{endpoint()}/{repo_id}", fix=_MIRROR_FIX) from None
        except (HfHubHTTPError, EntryNotFoundError) as problem:
            raise SeatplanError(f"the Hub refused a file of {repo_id}@{commit[:12]}: {problem}", where=f"{endpoint()}/{repo_id}",
                                fix=_token_fix(repo_id)) from None
    _remember_ref(repo_id, revision, commit)
    return HubModel(repo_id, revision, commit, directory)


_MIRROR_FIX = "check HF_ENDPOINT: it must be a Hugging Face Hub or a mirror of its API (olah, a proxy of the Hub)"


def _said(problem: Exception) -> str:
    return f"{type(problem).__name__}: {str(problem)[:300]}"


def _intact(directory: Path) -> bool:
    """The facts directory is there and holds what its record says: each file's size, and each safetensors
    header's and config file's SHA-256 (a copy cut short, or a header overwritten, is read again from the Hub)."""
    try:
        record = json.loads((directory / RECORD).read_text(encoding="utf-8"))
        files = record["files"]
        for name, (size, sha256) in files.items():
            path = directory / name
            if not SAFE_FILE_NAME.fullmatch(name) or path.stat().st_size != size or _file_sha256(path) != sha256:
                return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return isinstance(files, dict)


def _discard(directory: Path) -> None:
    """A damaged facts directory out of the way (renamed first, so no reader sees it half removed)."""
    if directory.exists():
        aside = directory.with_name(f".damaged-{directory.name}-{os.getpid()}")
        directory.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)


def _file_sha256(path: Path) -> str:
    """A config file's SHA-256, or a safetensors file's header's (the copies hold no tensors)."""
    if path.suffix == ".safetensors":
        return weights.header_sha256(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _token_fix(repo_id: str) -> str:
    return (f"set HF_TOKEN (or HF_TOKEN_PATH, a file holding it) to a token of an account that may read {repo_id}; "
            f"for a gated model, accept its terms first at {endpoint()}/{repo_id}")


def _resolve(repo_id: str, revision: str) -> tuple[str, list[str]]:
    """The commit ``revision`` names now and the repository's file names at that commit."""
    api = HfApi()
    try:
        info = api.model_info(repo_id, revision=revision, timeout=hub_timeout_s())
    except GatedRepoError:
        raise SeatplanError(f"{repo_id} is a gated model and the Hub refused this token", where=f"{endpoint()}/{repo_id}",
                            fix=_token_fix(repo_id)) from None
    except RevisionNotFoundError:
        raise _missing_revision(repo_id, revision, _revision_names(api, repo_id)) from None
    except RepositoryNotFoundError:
        # Some mirrors (olah) answer an unknown revision as an unknown repository: the refs tell them apart.
        names = _revision_names(api, repo_id)
        if names:
            raise _missing_revision(repo_id, revision, names) from None
        raise SeatplanError(f"{repo_id} is no local directory ({Path(repo_id).resolve()} does not exist) and not on the Hub, "
                            "or is private and this request had no token that may read it",
                            where=f"{endpoint()}/{repo_id}",
                            fix=f"give the model's directory, or {_token_fix(repo_id)}") from None
    except HFValidationError as problem:
        # parse_hub_id follows huggingface_hub's rules; should a release tighten them, this names the model, not a traceback
        raise SeatplanError(f"{repo_id} is no local directory ({Path(repo_id).resolve()} does not exist) and not a Hugging Face id: {problem}",
                            where=repo_id, fix="give the model's directory, or ORG/NAME[@REVISION]") from None
    except HfHubHTTPError as problem:
        raise SeatplanError(f"the Hub refused {repo_id}@{revision}: {str(problem)[:300]}", where=f"{endpoint()}/{repo_id}",
                            fix="check HF_ENDPOINT and HF_TOKEN, or set HF_HUB_OFFLINE=1 to use the cache") from None
    except (ValueError, TypeError, KeyError, AttributeError) as problem:  # a body that is no model_info document
        raise SeatplanError(f"the Hub's model_info for {repo_id}@{revision} cannot be read ({_said(problem)})",
                            where=f"{endpoint()}/api/models/{repo_id}", fix=_MIRROR_FIX) from None
    sha = info.sha
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
        said = "none" if sha is None else repr(str(sha)[:60])
        raise SeatplanError(f"the Hub named no commit (40 hex digits) for {repo_id}@{revision}: its field sha is {said}",
                            where=f"{endpoint()}/api/models/{repo_id}: sha", fix=_MIRROR_FIX)
    siblings = info.siblings if isinstance(info.siblings, list) else []
    return sha, [name for name in (getattr(sibling, "rfilename", None) for sibling in siblings) if isinstance(name, str)]


def _revision_names(api: HfApi, repo_id: str) -> list[str]:
    """The repository's branches and tags; empty when it cannot be listed (absent, private, gated)."""
    try:
        refs = api.list_repo_refs(repo_id)
    except (HfHubHTTPError, httpx2.HTTPError, ValueError, TypeError, KeyError, AttributeError):
        return []
    names = [getattr(ref, "name", None) for ref in [*(refs.branches or []), *(refs.tags or [])]]
    return sorted(name[:100] for name in names if isinstance(name, str) and name.isprintable())[:50]


def _missing_revision(repo_id: str, revision: str, names: list[str]) -> SeatplanError:
    where = f"{endpoint()}/{repo_id}@{revision}"
    if revision in names:  # listed, yet not resolved: saying "it has" the same name would contradict itself
        return SeatplanError(f"the Hub lists {revision!r} among {repo_id}'s branches and tags, but answered that it has no such "
                             "revision", where=where, fix="run it again; if the Hub (or the mirror HF_ENDPOINT names) keeps "
                             f"answering so, pin a commit hash: {repo_id}@COMMIT")
    if names:
        return SeatplanError(f"{repo_id} has no revision {revision!r}; it has {', '.join(names)}", where=where,
                             fix=f"use one of its branches or tags, or a commit hash: {repo_id}@{names[0]}")
    return SeatplanError(f"{repo_id} has no revision {revision!r}", where=where,
                         fix=f"use a branch, tag or commit hash the repository has, for example {repo_id}@main")


def _download_facts(repo_id: str, revision: str, commit: str, files: list[str], fact_files: tuple[str, ...],
                    directory: Path) -> None:
    """Fill a new facts directory beside its final place, then rename it in: a reader never sees half of one."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=directory.parent))
    try:
        for name in fact_files:
            if name in files:
                (staging / name).write_bytes(_read_file(repo_id, name, commit))
        shards = _safetensors_names(staging, files)
        for name in shards:
            header, file_bytes = _range_read_header(repo_id, name, commit)
            _write_sparse_copy(staging / name, header, file_bytes)
        written = {path.name: [path.stat().st_size, _file_sha256(path)] for path in staging.iterdir()}
        record = {"repo_id": repo_id, "revision": revision, "commit": commit, "endpoint": endpoint(),
                  "safetensors": shards, "files": written}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        try:
            staging.rename(directory)
        except OSError:
            if not (directory / RECORD).is_file():  # not a concurrent run that got there first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _read_file(repo_id: str, name: str, commit: str) -> bytes:
    """A config file of the commit, whole, no longer than ``reader.MAX_JSON_BYTES`` (read no further)."""
    url = hf_hub_url(repo_id, name, revision=commit)
    body = bytearray()
    with get_session().stream("GET", url, headers=build_hf_headers(), timeout=hub_timeout_s()) as response:
        _raise_for_status(response, url)
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > reader.MAX_JSON_BYTES:
                raise SeatplanError(f"the Hub sent more than {reader.MAX_JSON_BYTES:,} bytes of {name}, too large for a config file",
                                    where=f"{redact_dsn(url)}: body", fix="check that the repository is a model repository")
    try:  # checked before it is kept: a cut or padded answer must not become the commit's cached config
        loads_bounded(bytes(body).decode("utf-8"))
    except ValueError as problem:  # JSONDecodeError, UnicodeDecodeError, too deep, not finite
        raise SeatplanError(f"the Hub's {name} is no JSON document ({type(problem).__name__}: {str(problem)[:200]})",
                            where=f"{redact_dsn(url)}: body", fix=_MIRROR_FIX + "; nothing of it was kept") from None
    return bytes(body)


def _safetensors_names(staging: Path, files: list[str]) -> list[str]:
    index = reader.read_optional_json(staging / "model.safetensors.index.json")
    if index is not None:
        weight_map = index.get("weight_map")
        values = list(weight_map.values()) if isinstance(weight_map, dict) else []
        for name in values:
            if not isinstance(name, str) or not SAFE_FILE_NAME.fullmatch(name) or name not in files:
                raise SeatplanError(f"the shard index names {str(name)[:100]!r}, which is no file the repository holds at the top level",
                                    where=f"{endpoint()}: model.safetensors.index.json: weight_map",
                                    fix="the index is damaged; fix the repository")
        return sorted(set(values))
    names = sorted(name for name in files if name.endswith(".safetensors") and "/" not in name)
    for name in names:
        if not SAFE_FILE_NAME.fullmatch(name):
            raise SeatplanError(f"the Hub lists a safetensors file named {name[:100]!r}, which is no plain file name",
                                where=f"{endpoint()}/api/models: siblings", fix=_MIRROR_FIX)
    return names


def _range_read_header(repo_id: str, filename: str, commit: str) -> tuple[bytes, int]:
    """(the 8-byte length and the JSON header, the file's size in bytes), reading no byte of the tensors."""
    url = hf_hub_url(repo_id, filename, revision=commit)
    where = f"{redact_dsn(url)}: header"
    first, file_bytes = _ranged_get(url, 0, PROBE_BYTES)
    if len(first) < 8:
        raise SeatplanError(f"{filename} is {file_bytes} bytes, shorter than a safetensors header", where=where,
                            fix="the file on the Hub is damaged")
    if not 8 <= file_bytes <= MAX_FILE_BYTES:
        raise SeatplanError(f"the Hub gives {filename} a size of {file_bytes} bytes", where=f"{where}: size", fix=_MIRROR_FIX)
    declared = int.from_bytes(first[:8], "little")
    if declared > weights.MAX_HEADER_BYTES or 8 + declared > file_bytes:
        raise SeatplanError(f"{filename} declares a {declared}-byte header in a {file_bytes}-byte file "
                            f"(limit {weights.MAX_HEADER_BYTES})", where=where, fix="the file on the Hub is damaged")
    wanted = 8 + declared
    if len(first) < wanted:
        rest, _ = _ranged_get(url, len(first), wanted - len(first))
        first += rest
    if len(first) < wanted:
        raise SeatplanError(f"the Hub sent {len(first)} of {filename}'s {wanted} header bytes", where=where,
                            fix="try again; a mirror must answer HTTP range requests")
    return first[:wanted], file_bytes


def _ranged_get(url: str, start: int, length: int) -> tuple[bytes, int]:
    """At most ``length`` bytes from ``start``, and the whole file's size (from Content-Range, or the length
    of a server that ignored the range: then the stream is cut, never read to its end)."""
    headers = {**build_hf_headers(), "range": f"bytes={start}-{start + length - 1}"}
    body = bytearray()
    with get_session().stream("GET", url, headers=headers, timeout=hub_timeout_s()) as response:
        _raise_for_status(response, url)
        ranged = response.status_code == 206
        limit = length if ranged else start + length
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= limit:
                break
        file_bytes = _file_bytes(response.headers)
    if file_bytes is None:  # a chunked answer to the whole file (olah's local mirrors): the size comes by HEAD
        file_bytes = _head_file_bytes(url)
    return bytes(body[:length]) if ranged else bytes(body[start:limit]), file_bytes


def _raise_for_status(response: Any, url: str) -> None:
    try:
        hf_raise_for_status(response)
    except GatedRepoError:
        raise SeatplanError("the Hub refused a gated model's file to this token", where=redact_dsn(url),
                            fix="set HF_TOKEN (or HF_TOKEN_PATH, a file holding it) to a token of an account that accepted "
                                "the model's terms on the Hub") from None
    except (EntryNotFoundError, HfHubHTTPError) as problem:
        raise SeatplanError(f"the Hub refused a file: {str(problem)[:300]}", where=redact_dsn(url),
                            fix="check HF_TOKEN and that the repository holds the file") from None


def _file_bytes(headers: Any) -> int | None:
    """The whole file's size: Content-Range's total for a range answer, else Content-Length."""
    content_range = headers.get("content-range", "")
    text = content_range.rpartition("/")[2] if content_range else headers.get("content-length", "")
    return whole_number(text, maximum=MAX_FILE_BYTES)  # anything else ("*", "²"): asked by HEAD


def _head_file_bytes(url: str) -> int:
    try:
        size = get_hf_file_metadata(url, timeout=hub_timeout_s()).size
    except (HfHubHTTPError, httpx2.HTTPError, ValueError, TypeError) as problem:
        raise SeatplanError(f"the Hub gave no size for a safetensors file: {problem}", where=redact_dsn(url),
                            fix="a mirror must answer HEAD with Content-Length or GET ranges with Content-Range") from None
    if not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
        raise SeatplanError("the Hub gave no size for a safetensors file", where=f"{redact_dsn(url)}: Content-Length",
                            fix="a mirror must answer HEAD with Content-Length or GET ranges with Content-Range")
    return size


def _write_sparse_copy(path: Path, header: bytes, file_bytes: int) -> None:
    with path.open("wb") as stream:
        stream.write(header)
        stream.truncate(file_bytes)  # a hole: the file's size, no blocks on disk


def _from_caches(repo_id: str, revision: str, why: str) -> HubModel:
    """Offline: the header cache of the commit the Hub cache's ref names, else the Hub cache's snapshot itself
    (a fully downloaded model, or configs only: then the weights are estimated, as for a local directory)."""
    repo_cache = reader.hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    commit = revision if _COMMIT.fullmatch(revision) else (_cached_ref(_repo_dir(repo_id), revision)
                                                           or _cached_ref(repo_cache, revision))
    if commit is not None:
        directory = _facts_dir(repo_id, commit)
        if _intact(directory):
            return HubModel(repo_id, revision, commit, directory)
        snapshot = repo_cache / "snapshots" / commit
        if (snapshot / "config.json").is_file():
            return HubModel(repo_id, revision, commit, snapshot)
    raise SeatplanError(f"{why}, and no cache holds {repo_id}@{revision}", where=str(repo_cache),
                        fix=f"run it once with the Hub in reach (unset HF_HUB_OFFLINE): seatplan model {repo_id}@{revision}")


def _cached_ref(repo_cache: Path, revision: str) -> str | None:
    if not _plain_ref(revision):
        return None
    ref = repo_cache / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if CACHED_COMMIT.fullmatch(commit) else None
