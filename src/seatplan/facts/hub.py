"""Models on the Hugging Face Hub (or a Hub-compatible mirror), read without downloading weights.

``ORG/NAME[@REVISION]`` resolves to a commit, its config files come through ``huggingface_hub``
(``hf_hub_download``: ``HF_ENDPOINT``, ``HF_TOKEN`` / ``HF_TOKEN_PATH``, ``HF_HUB_OFFLINE`` and the Hub cache
all as users set them), and each safetensors file contributes only its header, by HTTP range reads: the
first 100,000 bytes (as ``huggingface_hub.get_safetensors_metadata`` and hf-mem do; most headers fit), then
the rest of the header when it is longer. With a shard index, the files are the index's ``weight_map``; else
the repository's top-level ``*.safetensors`` (vLLM's own choice, ``weight_utils.filter_duplicate_safetensors_files``).

The result is a *facts directory* per commit under ``$XDG_CACHE_HOME/seatplan/hub-headers`` (default
``~/.cache/seatplan``): the config files, and each safetensors file as a sparse copy of its own size that holds
the real header and a hole where the tensors are (no disk blocks). The facts stage then reads it exactly as a
local checkout, with the one header parser (``weights.read_safetensors_header``), so the Hub gives the same
facts as the directory, to the byte. The copies are not a loadable model and live outside the Hub cache, where
no engine looks. A commit never changes, so a second run reads the facts directory with no network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from seatplan.errors import SeatplanError
from seatplan.facts import reader, weights
from seatplan.hub_names import parse_hub_id

PROBE_BYTES = 100_000  # huggingface_hub's and hf-mem's first read: 97% of headers fit (huggingface_hub PR 1855)
TIMEOUT_S = 30.0
RECORD = "seatplan-hub.json"  # what the facts directory was read from: repo, revision, commit, endpoint
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CACHED_COMMIT = re.compile(r"[0-9A-Za-z]{1,64}")  # what a Hub cache ref or snapshot may name (mirrors vary)


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


def _remember_ref(repo_id: str, revision: str, commit: str) -> None:
    """``refs/REVISION`` → commit, as the Hub cache keeps it, so an offline run knows what ``main`` was."""
    if revision == commit:
        return
    ref = _repo_dir(repo_id) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    temporary = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
    temporary.write_text(commit, encoding="utf-8")
    temporary.replace(ref)


def commit_of(directory: Path) -> str | None:
    """The commit a facts directory (or a Hub cache snapshot) holds; None for a plain local directory."""
    record = directory / RECORD
    if record.is_file():
        commit = reader.read_json(record).get("commit")
        return commit if isinstance(commit, str) else None
    if directory.parent.name == "snapshots" and directory.parent.parent.name.startswith("models--") \
            and _CACHED_COMMIT.fullmatch(directory.name):
        return directory.name
    return None


def fetch_model(model: str, fact_files: tuple[str, ...]) -> HubModel:
    """The facts directory of ``ORG/NAME[@REVISION]``: from the header cache when that commit was read before,
    else from the Hub; offline (``HF_HUB_OFFLINE``, or the Hub out of reach) from the caches alone."""
    parsed = parse_hub_id(model)
    if parsed is None:
        raise SeatplanError(f"{model!r} is not a Hugging Face id", where=model, fix="write ORG/NAME or ORG/NAME@REVISION")
    repo_id, revision = parsed
    if constants.is_offline_mode():
        return _from_caches(repo_id, revision, "HF_HUB_OFFLINE is set")
    try:
        commit, files = _resolve(repo_id, revision)
    except (httpx2.TransportError, OfflineModeIsEnabled) as problem:
        return _from_caches(repo_id, revision, f"the Hub at {constants.ENDPOINT} cannot be reached ({problem})")
    directory = _facts_dir(repo_id, commit)
    if not (directory / RECORD).is_file():
        try:
            _download_facts(repo_id, revision, commit, files, fact_files, directory)
        except (httpx2.TransportError, OfflineModeIsEnabled) as problem:
            raise SeatplanError(f"lost the Hub at {constants.ENDPOINT} while reading {repo_id}@{commit[:12]} ({problem})",
                                where=f"{constants.ENDPOINT}/{repo_id}", fix="run it again; nothing half-read was kept") from None
        except (HfHubHTTPError, EntryNotFoundError) as problem:
            raise SeatplanError(f"the Hub refused a file of {repo_id}@{commit[:12]}: {problem}", where=f"{constants.ENDPOINT}/{repo_id}",
                                fix=_token_fix(repo_id)) from None
    _remember_ref(repo_id, revision, commit)
    return HubModel(repo_id, revision, commit, directory)


def _token_fix(repo_id: str) -> str:
    return (f"set HF_TOKEN (or HF_TOKEN_PATH, a file holding it) to a token of an account that may read {repo_id}; "
            f"for a gated model, accept its terms first at {constants.ENDPOINT}/{repo_id}")


def _resolve(repo_id: str, revision: str) -> tuple[str, list[str]]:
    """The commit ``revision`` names now and the repository's file names at that commit."""
    api = HfApi()
    try:
        info = api.model_info(repo_id, revision=revision, timeout=TIMEOUT_S)
    except GatedRepoError:
        raise SeatplanError(f"{repo_id} is a gated model and the Hub refused this token", where=f"{constants.ENDPOINT}/{repo_id}",
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
                            where=f"{constants.ENDPOINT}/{repo_id}",
                            fix=f"give the model's directory, or {_token_fix(repo_id)}") from None
    except HFValidationError as problem:
        # parse_hub_id follows huggingface_hub's rules; should a release tighten them, this names the model, not a traceback
        raise SeatplanError(f"{repo_id} is no local directory ({Path(repo_id).resolve()} does not exist) and not a Hugging Face id: {problem}",
                            where=repo_id, fix="give the model's directory, or ORG/NAME[@REVISION]") from None
    except HfHubHTTPError as problem:
        raise SeatplanError(f"the Hub refused {repo_id}@{revision}: {problem}", where=f"{constants.ENDPOINT}/{repo_id}",
                            fix="check HF_ENDPOINT and HF_TOKEN, or set HF_HUB_OFFLINE=1 to use the cache") from None
    if not isinstance(info.sha, str) or not _COMMIT.fullmatch(info.sha):
        raise SeatplanError(f"the Hub named no commit for {repo_id}@{revision}", where=f"{constants.ENDPOINT}/{repo_id}",
                            fix="check HF_ENDPOINT: it must be a Hugging Face Hub or a mirror of its API")
    return info.sha, [sibling.rfilename for sibling in info.siblings or []]


def _revision_names(api: HfApi, repo_id: str) -> list[str]:
    """The repository's branches and tags; empty when it cannot be listed (absent, private, gated)."""
    try:
        refs = api.list_repo_refs(repo_id)
    except (HfHubHTTPError, httpx2.TransportError):
        return []
    return sorted([ref.name for ref in refs.branches] + [ref.name for ref in refs.tags])


def _missing_revision(repo_id: str, revision: str, names: list[str]) -> SeatplanError:
    where = f"{constants.ENDPOINT}/{repo_id}@{revision}"
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
                cached = Path(hf_hub_download(repo_id, name, revision=commit, etag_timeout=TIMEOUT_S))
                _copy_bounded(cached, staging / name)
        shards = _safetensors_names(staging, files)
        for name in shards:
            header, file_bytes = _range_read_header(repo_id, name, commit)
            _write_sparse_copy(staging / name, header, file_bytes)
        record = {"repo_id": repo_id, "revision": revision, "commit": commit, "endpoint": constants.ENDPOINT,
                  "safetensors": shards}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        try:
            staging.rename(directory)
        except OSError:
            if not (directory / RECORD).is_file():  # not a concurrent run that got there first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy_bounded(source: Path, target: Path) -> None:
    if source.stat().st_size > reader.MAX_JSON_BYTES:
        raise SeatplanError(f"{source.name} is {source.stat().st_size} bytes, too large for a config file", where=str(source),
                            fix="check that the repository is a model repository")
    shutil.copyfile(source, target)


def _safetensors_names(staging: Path, files: list[str]) -> list[str]:
    index = reader.read_optional_json(staging / "model.safetensors.index.json")
    if index is not None:
        weight_map = index.get("weight_map")
        names = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        for name in names:
            if not isinstance(name, str) or "/" in name or name.startswith(".") or name not in files:
                raise SeatplanError(f"the shard index names {name!r}, which the repository does not hold at the top level",
                                    where="model.safetensors.index.json: weight_map", fix="the index is damaged; fix the repository")
        return names
    return sorted(name for name in files if name.endswith(".safetensors") and "/" not in name)


def _range_read_header(repo_id: str, filename: str, commit: str) -> tuple[bytes, int]:
    """(the 8-byte length and the JSON header, the file's size in bytes), reading no byte of the tensors."""
    url = hf_hub_url(repo_id, filename, revision=commit)
    where = f"{url}: header"
    first, file_bytes = _ranged_get(url, 0, PROBE_BYTES)
    if len(first) < 8:
        raise SeatplanError(f"{filename} is {file_bytes} bytes, shorter than a safetensors header", where=where,
                            fix="the file on the Hub is damaged")
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
    with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT_S) as response:
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
        raise SeatplanError("the Hub refused a gated model's file to this token", where=url,
                            fix="set HF_TOKEN (or HF_TOKEN_PATH, a file holding it) to a token of an account that accepted "
                                "the model's terms on the Hub") from None
    except (EntryNotFoundError, HfHubHTTPError) as problem:
        raise SeatplanError(f"the Hub refused a safetensors header: {problem}", where=url,
                            fix="check HF_TOKEN and that the repository holds the file") from None


def _file_bytes(headers: Any) -> int | None:
    """The whole file's size: Content-Range's total for a range answer, else Content-Length."""
    content_range = headers.get("content-range", "")
    if content_range:
        total = content_range.rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = headers.get("content-length", "")
    return int(length) if length.isdigit() else None


def _head_file_bytes(url: str) -> int:
    try:
        size = get_hf_file_metadata(url, timeout=TIMEOUT_S).size
    except (HfHubHTTPError, httpx2.TransportError) as problem:
        raise SeatplanError(f"the Hub gave no size for a safetensors file: {problem}", where=url,
                            fix="a mirror must answer HEAD with Content-Length or GET ranges with Content-Range") from None
    if size is None:
        raise SeatplanError("the Hub gave no size for a safetensors file", where=url,
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
        if (directory / RECORD).is_file():
            return HubModel(repo_id, revision, commit, directory)
        snapshot = repo_cache / "snapshots" / commit
        if (snapshot / "config.json").is_file():
            return HubModel(repo_id, revision, commit, snapshot)
    raise SeatplanError(f"{why}, and no cache holds {repo_id}@{revision}", where=str(repo_cache),
                        fix=f"run it once with the Hub in reach (unset HF_HUB_OFFLINE): seatplan model {repo_id}@{revision}")


def _cached_ref(repo_cache: Path, revision: str) -> str | None:
    ref = repo_cache / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if _CACHED_COMMIT.fullmatch(commit) else None
