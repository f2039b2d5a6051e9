"""Stands in for a vLLM engine's `/metrics` with LoRA adapters, and reads an engine's.

`serve MAX_LORA OLD_RUNNING NEW_RUNNING`: registers `vllm:lora_requests_info` as vLLM's
`PrometheusStatLogger` does (a `prometheus_client` gauge with labels `max_lora`,
`waiting_lora_adapters` and `running_lora_adapters`, set to the current time after each
step; label sets are never removed), sets it for two steps (OLD_RUNNING, then
NEW_RUNNING, comma-separated names), serves it with `prometheus_client`'s own HTTP
server on 127.0.0.1, a free port, prints the port and stays up until stdin closes.

`read`: parses the Prometheus text on stdin with `prometheus_client`'s parser and prints
the labels of the `vllm:lora_requests_info` sample with the latest value, as JSON.
"""

import json
import sys
import time

from prometheus_client import CollectorRegistry, Gauge, start_http_server
from prometheus_client.parser import text_string_to_metric_families


def serve(max_lora, old_running, new_running):
    registry = CollectorRegistry()
    gauge = Gauge(
        name="vllm:lora_requests_info",
        documentation="Running stats on lora requests.",
        labelnames=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
        registry=registry,
    )
    for running in (old_running, new_running):
        gauge.labels(
            max_lora=max_lora, waiting_lora_adapters="", running_lora_adapters=running
        ).set_to_current_time()
        time.sleep(0.01)
    server, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    print(server.server_port, flush=True)
    sys.stdin.read()


def read():
    latest = None
    for family in text_string_to_metric_families(sys.stdin.read()):
        for sample in family.samples:
            if sample.name == "vllm:lora_requests_info":
                if latest is None or sample.value >= latest.value:
                    latest = sample
    print(json.dumps(latest.labels if latest else None))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(*sys.argv[2:5])
    else:
        read()
