"""The end-of-session scan for test secrets (tests/kits/leaks.py) finds them wherever a test could leave one: across
its read chunks, after a hole in a sparse file, at a file's very start and end, and reads only the data a sparse
file holds (a Hub test leaves a copy announcing 16 GiB)."""

from __future__ import annotations

import random

from kits.leaks import CHUNK_BYTES, TEST_SECRETS, data_regions, files_holding_secrets, secrets_in


def test_a_secret_is_found_at_any_offset_even_across_chunks(tmp_path, rng: random.Random) -> None:
    for secret in TEST_SECRETS:
        for offset in [0, CHUNK_BYTES - len(secret) // 2, CHUNK_BYTES * 2 - 1, rng.randrange(3 * CHUNK_BYTES)]:
            path = tmp_path / f"at-{offset}.bin"
            path.write_bytes(bytes(offset) + secret.encode() + bytes(rng.randrange(2 * CHUNK_BYTES)))
            assert secrets_in(path) == {secret}, offset
            path.unlink()  # the session's own scan would (rightly) report it


def test_a_sparse_file_is_read_only_where_it_holds_data(tmp_path, rng: random.Random) -> None:
    path = tmp_path / "sparse.bin"
    offset = rng.randrange(1 << 30, 8 << 30)
    with path.open("wb") as stream:
        stream.seek(offset)
        stream.write(TEST_SECRETS[0].encode())
        stream.truncate(16 << 30)
    with path.open("rb") as stream:
        held = sum(end - start for start, end in data_regions(stream.fileno(), path.stat().st_size))
    assert held < 64 << 20 or path.stat().st_blocks * 512 >= held  # a file system without holes reports the whole file
    assert files_holding_secrets(tmp_path) == [f"{path}: {TEST_SECRETS[0][:4]}..."]
    path.unlink()


def test_clean_files_and_named_inputs_are_not_reported(tmp_path) -> None:
    (tmp_path / "plan.json").write_text('{"key": "***"}')
    (tmp_path / "key.secret").write_text(TEST_SECRETS[1])
    assert files_holding_secrets(tmp_path) == []
    (tmp_path / "key.secret").unlink()
