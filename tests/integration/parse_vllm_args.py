"""Run under the vLLM virtualenv's Python: parse command lines with vLLM's own `vllm serve` parser.

stdin: a JSON list of argument lists (the words after `vllm`, starting with `serve`).
stdout: a JSON list, per command either {"ok": true, <the parsed values seatplan sets>} or
{"ok": false, "error": "..."}.
"""

import contextlib
import io
import json
import sys

import vllm.entrypoints.cli.serve as serve
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser


def parser_for_serve():
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subcommand")
    for command in serve.cmd_init():
        command.subparser_init(subparsers).set_defaults(validate=command.validate)
    return parser


def parse(words):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser_for_serve().parse_args(words)
            args.validate(args)
            if getattr(args, "model_tag", None):
                args.model = args.model_tag
            engine = AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        return {"ok": False, "error": stderr.getvalue().strip().splitlines()[-1]}
    return {
        "ok": True,
        "model": engine.model,
        "served_model_name": engine.served_model_name,
        "port": args.port,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "max_model_len": engine.max_model_len,
        "kv_cache_memory_bytes": engine.kv_cache_memory_bytes,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "max_num_seqs": engine.max_num_seqs,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "override_generation_config": engine.override_generation_config,
        "hf_overrides": engine.hf_overrides if isinstance(engine.hf_overrides, dict) else None,
        "enforce_eager": engine.enforce_eager,
    }


print(json.dumps([parse(words) for words in json.load(sys.stdin)]))
