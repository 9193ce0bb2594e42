"""A stand-in for a vLLM engine in the fast Ansible tests: answers /health on the --host/--port it is given.

The end-to-end test with the real vLLM CPU engine (test_apply_vllm.py beside it) runs the same
playbook; this one only lets the rollout logic (backups, restart-only-changed, one at a time, rollback)
be tested in seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STARTUP_DELAY_S = 1.0  # a real engine is not healthy at once; the playbook must wait


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status = 200 if self.path == "/health" else 404
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    known, _ = parser.parse_known_args()
    # SEATPLAN_TEST_EXIT=N (from the seat's env file): write N numbered lines to stderr and exit 3 before listening,
    # as an engine that dies at start does (the tests of apply's health check read its log's last lines back)
    lines = int(os.environ.get("SEATPLAN_TEST_EXIT", "-1"))
    if lines >= 0:
        for number in range(1, lines + 1):
            print(f"fake engine log line {number}", file=sys.stderr)
        sys.exit(3)
    time.sleep(STARTUP_DELAY_S)
    ThreadingHTTPServer((known.host, known.port), Health).serve_forever()


if __name__ == "__main__":
    main()
