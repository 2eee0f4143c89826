"""The adapter's start-up line (event `model_loaded`) per instance, from the endpoint's logs.

SageMaker writes each instance's container output to the log stream `<variant>/<instance-id>`
of the group `/aws/sagemaker/Endpoints/<endpoint>`; the newest such line of each stream says
what that instance runs on: its GPUs, the layers offloaded, the llama.cpp libraries bound.
Reading it needs only `logs:FilterLogEvents` on that group.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ops.clients import Client

EVENT = "model_loaded"  # decision_adapter/model/native_libraries.py MODEL_LOADED


def log_group(endpoint_name: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


def startup_lines(client: Client, endpoint_name: str) -> dict[str, Any]:
    """{log_group, instances: [newest line per stream, newest first], missing: why none}."""
    group = log_group(endpoint_name)
    newest: dict[str, tuple[int, dict[str, Any]]] = {}  # stream -> (timestamp, line)
    request = {"logGroupName": group, "filterPattern": f'{{ $.event = "{EVENT}" }}'}
    try:
        while True:
            page = client.filter_log_events(**request)
            for event in page.get("events", []):
                line = _line(event)
                stream = event.get("logStreamName", "")
                if line and (stream not in newest or event["timestamp"] > newest[stream][0]):
                    newest[stream] = (event["timestamp"], line)
            if not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
    except client.exceptions.ResourceNotFoundException:
        return {
            "log_group": group,
            "instances": [],
            # The endpoint stack creates the group before the endpoint: SageMaker never has to.
            "missing": f"no log group {group}: the endpoint stack creates it before the "
            "endpoint, so this endpoint is not one it deployed, or the group was deleted",
        }
    instances = [line for _, line in sorted(newest.values(), key=lambda n: n[0], reverse=True)]
    missing = None
    if not instances:
        missing = (
            f"no {EVENT} line in {group}: the model has not loaded yet, "
            "or the image predates this line"
        )
    return {"log_group": group, "instances": instances, "missing": missing}


def _line(event: dict[str, Any]) -> dict[str, Any] | None:
    try:
        fields = json.loads(event["message"])
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("event") != EVENT:
        return None
    model = fields.get("model") or {}
    return {
        "log_stream": event.get("logStreamName"),
        "time": datetime.fromtimestamp(event["timestamp"] / 1000, UTC).isoformat(),
        "gpus": fields.get("gpus"),
        "layers": fields.get("layers"),
        "model": model.get("name"),
        "llama_libraries": fields.get("llama_libraries", []),
    }


def render_line(line: dict[str, Any]) -> str:
    """One instance's start-up facts on one line."""
    gpus = line["gpus"]
    if gpus:
        gpu = ", ".join(f"{g['name']} ({g['memory_bytes'] // 2**20} MiB)" for g in gpus)
    else:
        gpu = "no GPU"
    layers = line["layers"] or {}
    libraries = ", ".join(path.rsplit("/", 1)[-1] for path in line["llama_libraries"])
    return (
        f"{line['log_stream']} at {line['time']}: {gpu}; "
        f"{layers.get('offloaded')}/{layers.get('total')} layers offloaded; "
        f"model {line['model']}; libraries {libraries or 'none'}"
    )
