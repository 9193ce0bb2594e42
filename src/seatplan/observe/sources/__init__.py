"""The readers of GPU memory history and engine gauges, one module per source.

* ``beszel``: Beszel's hub database (SQLite, PocketBase record types 1m … 480m).
* ``nvidia_smi``: ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV logs.
* ``prometheus``: DCGM exporter series, from saved exposition text or Prometheus' HTTP API.
* ``vllm_metrics``: vLLM's own ``/metrics`` gauges.
* ``shared``: what every reader shares (the count of what it left out, a series from its points).

Every reader returns MiB as nvidia-smi counts them and turns unreadable input into a
:class:`~seatplan.errors.SeatplanError` naming the file (and line) and what to do.
"""
