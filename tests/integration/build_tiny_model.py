"""Build one tiny random-weight Hugging Face model directory for the vLLM CPU boot tests.

Runs under the vLLM virtualenv's Python (it has torch, transformers and tokenizers; seatplan's own
environment has none of them):

    $SEATPLAN_VLLM_VENV/bin/python tests/integration/build_tiny_model.py SPEC.json OUT_DIR

SPEC.json is ``{"config": {<config fields>}, "config_json_extra": {<fields>}}``. The config keeps a
real model's KV geometry and shrinks everything else; this script only materialises it: random
weights (bf16 safetensors), a byte-level BPE tokenizer of ``config["vocab_size"]`` tokens with a
chat template, and the tokenizer's special-token ids as the config's bos/eos/pad so vLLM's stop
token exists. ``config_json_extra`` is added to the saved config.json where transformers writes a
newer form than the published checkpoints carry (Nemotron-H's ``hybrid_override_pattern``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Enough varied text for the BPE trainer to fill a few hundred merges; the content is irrelevant.
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog while the engine counts its cache blocks.",
    "Seats share a few GPUs behind a gateway; every seat pins its KV cache memory in bytes.",
    "Hello, how are you today? I am a tiny model with random weights and a small vocabulary.",
    "Numbers 0123456789 and punctuation !?.,;:()[]{} appear so that every byte is seen.",
    "Sliding windows, latent attention, Mamba states and gated delta nets all need blocks.",
] * 20


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(config_fields: dict, config_json_extra: dict, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer = build_tokenizer(config_fields["vocab_size"])
    fields = dict(config_fields)
    fields.update(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    if config_json_extra:
        config_path = out_dir / "config.json"
        saved = json.loads(config_path.read_text())
        config_path.write_text(json.dumps({**saved, **config_json_extra}, indent=2, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    out_dir = Path(argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    build_model(spec["config"], spec.get("config_json_extra", {}), out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
