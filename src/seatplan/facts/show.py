"""How ``seatplan model`` prints for people: a readable Rich breakdown of the model document (``document.py``)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from seatplan.facts.models import ModelFacts
from seatplan.output import console, fit_table
from seatplan.units import human_bytes


def layer_list(layers: list[int]) -> str:
    """``0-47``, ``3,7,...,47 (every 4)`` or a short explicit list."""
    if len(layers) == 1:
        return str(layers[0])
    steps = {b - a for a, b in zip(layers, layers[1:])}
    if steps == {1}:
        return f"{layers[0]}-{layers[-1]}"
    if len(steps) == 1 and len(layers) > 3:
        return f"{layers[0]},{layers[1]},...,{layers[-1]} (every {steps.pop()})"
    return ",".join(str(layer) for layer in layers)


def print_breakdown(facts: ModelFacts, document: dict[str, Any], wide: bool = False) -> None:
    out = console(wide)
    settings = facts.settings
    # never folded: a model path cut at the margin is a path nobody can copy, and its tail read as a new line
    out.print(f"[bold]{escape(facts.model)}[/]  {escape(facts.architecture)} ({escape(facts.model_type)})", soft_wrap=True)
    # indented as a block, so that a line wrapped at 80 columns stays under the one it continues
    out.print(Padding(
        f"vLLM {settings.vllm_version} on {settings.device}, TP {settings.tensor_parallel_size}, dtype {facts.dtype}, "
        f"KV {facts.kv_cache_dtype} ({facts.kv_dtype_bytes} B), KV heads/rank {facts.kv_heads_per_rank}, "
        f"prefix caching {'on' if settings.prefix_caching else 'off'}, in-flight tokens {settings.in_flight_tokens:,}", (0, 0, 0, 2)))
    length = document["max_model_len"]
    table = Table(title=f"KV cache groups (per GPU, at max_model_len {length:,})")
    for column in ("kind", "layers", "count", "padding", "block size", "page bytes", "blocks/request"):
        table.add_column(column, justify="left" if column in ("kind", "layers") else "right")
    for group in facts.layer_groups:
        table.add_row(group.kind, layer_list(group.layers), str(len(group.layers)), str(group.padding_layers),
                      str(group.block_size), f"{group.page_bytes:,}",
                      f"{group.spec.blocks_per_request(length, settings.in_flight_tokens):,}")
    # The block size is printed below the table too; padding is the least telling column.
    out.print(fit_table(table, out.width, ("padding", "block size")))
    # One label a line, its value wrapped under itself (a grid, not padded text, which wrapped to the margin).
    rows = [("KV bytes per token", f"{facts.kv_bytes_per_token:,} B ({human_bytes(facts.kv_bytes_per_token)})")]
    if facts.state_bytes_per_request:
        rows.append(("recurrent state/request", f"{facts.state_bytes_per_request:,} B ({human_bytes(facts.state_bytes_per_request)})"))
    rows.append(("block size", f"{facts.block_size} tokens, {facts.bytes_per_block:,} B per block"))
    rows.append((f"one {length:,}-token request", f"{document['blocks_per_request']:,} blocks, {human_bytes(document['request_kv_bytes'])}"
                 f" (smallest budget that boots: {human_bytes(document['min_kv_cache_bytes'])})"))
    if document["num_blocks"] is not None:
        rows.append((f"budget {human_bytes(document['kv_cache_memory_bytes'])}",
                     f"{document['num_blocks']:,} blocks; longest max_model_len that fits: {document['max_model_len_fit']:,}"))
    else:
        rows.append(("budget", "(give --kv-cache-memory-bytes for blocks, tokens and concurrency)"))
    before_log_line, rows = rows, []
    source = f"exact, {facts.weights_source}" if facts.weights_exact else facts.weights_source
    rows.append(("weights per GPU", f"{human_bytes(facts.weights_bytes)} as loaded ({escape(facts.weights_rule)}); "
                 f"{human_bytes(facts.weights_stored_bytes or facts.weights_bytes)} as stored ({escape(source)}); "
                 f"{facts.shape.total_params / 1e9:.2f}B params, {facts.shape.active_params / 1e9:.2f}B active"))
    if facts.speculative is not None:
        draft = facts.speculative
        rows.append((f"speculative ({draft.method})",
                     f"{escape(draft.model or 'no draft model')}: {draft.num_layers} layer(s) joining the KV groups, "
                     f"{draft.kv_bytes_per_token:,} of the {facts.kv_bytes_per_token:,} B of KV per token; "
                     f"{human_bytes(draft.weights_bytes)} of draft weights per GPU (TP {draft.tensor_parallel_size}), "
                     f"{draft.num_speculative_tokens} token(s) a step"))
    if facts.lora is not None:
        lora = facts.lora
        rows.append(("LoRA slots", f"{human_bytes(lora.slot_bytes)} per GPU: {lora.max_loras} × rank {lora.max_lora_rank} "
                     f"({lora.lora_dtype}) over {', '.join(lora.modules)}; inside the weights above"))
    published = f"{facts.max_context_published:,}" if facts.max_context_published else "unknown"
    rows.append(("context", f"derived {facts.max_context_derived:,}, default {facts.max_context_default:,}, published {published}"))
    if facts.yarn:
        yarn = facts.yarn
        rows.append((f"YaRN ({'enabled' if yarn.enabled else 'not enabled'})",
                     f"x{yarn.factor:g} from {yarn.original_max_position_embeddings:,} → {yarn.extended_max_model_len:,} tokens, "
                     f"{human_bytes(yarn.extended_request_kv_bytes)} KV per request"
                     + (" (needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)" if yarn.needs_long_max_model_len_env else "")))
    label_width = max(len(label) for label, _ in before_log_line + rows)

    def print_rows(labelled: list[tuple[str, str]]) -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, min_width=label_width)
        grid.add_column()
        for label, value in labelled:
            grid.add_row(label, value)
        out.print(Padding(grid, (0, 0, 0, 2)))

    print_rows(before_log_line)
    if document["num_blocks"] is not None:
        # vLLM's own start-up line, whole on one line (as the engine's log has it, to compare or grep)
        style = "green" if document["fits_one_request"] else "red"
        out.print(f"  [{style}]{escape(document['log_line'])}[/]", soft_wrap=True)
    print_rows(rows)
    for note in facts.notes:
        out.print(Padding(f"[dim]vLLM: {note}[/]", (0, 0, 0, 2)))
    for warning in document["warnings"]:
        out.print(Padding(f"[yellow]warning: {warning}[/]", (0, 0, 0, 2)))
