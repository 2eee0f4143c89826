"""Endpoint status and, per variant, the instance type SageMaker placed from the pool."""

from __future__ import annotations

from typing import Any

from ops.clients import Client


def endpoint_status(client: Client, endpoint_name: str) -> dict[str, Any]:
    endpoint = client.describe_endpoint(EndpointName=endpoint_name)
    config = client.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    configured = {v["VariantName"]: v for v in config.get("ProductionVariants", [])}
    return {
        "endpoint": endpoint["EndpointName"],
        "status": endpoint["EndpointStatus"],
        "failure_reason": endpoint.get("FailureReason"),
        "endpoint_config": endpoint["EndpointConfigName"],
        "variants": [
            _variant(summary, configured.get(summary["VariantName"], {}))
            for summary in endpoint.get("ProductionVariants", [])
        ],
    }


def _variant(summary: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    priorities = {p["InstanceType"]: p.get("Priority") for p in configured.get("InstancePools", [])}
    pools = [
        {
            "instance_type": pool["InstanceType"],
            "priority": priorities.get(pool["InstanceType"]),
            "running": pool.get("CurrentInstanceCount", 0),
        }
        for pool in summary.get("InstancePools", [])
    ]
    pools.sort(key=lambda p: (p["priority"] is None, p["priority"] or 0))
    if pools:
        running_on = [p["instance_type"] for p in pools if p["running"]]
    elif configured.get("InstanceType"):
        # A variant without a pool runs on its one configured type.
        running_on = [configured["InstanceType"]] if summary.get("CurrentInstanceCount") else []
    else:
        running_on = []
    return {
        "variant": summary["VariantName"],
        "running_on": running_on,
        "current_instances": summary.get("CurrentInstanceCount"),
        "desired_instances": summary.get("DesiredInstanceCount"),
        "pools": pools,
        "images": [
            i.get("ResolvedImage") or i.get("SpecifiedImage")
            for i in summary.get("DeployedImages", [])
        ],
        "in_progress": [s.get("Status") for s in summary.get("VariantStatus", [])],
    }


def render_status(status: dict[str, Any]) -> str:
    """The status, each variant with its instances' start-up lines (ops/startup_log.py)."""
    from ops.startup_log import render_line

    startup = status.get("startup") or {"instances": [], "missing": None}
    lines = [f"endpoint {status['endpoint']}: {status['status']}"]
    if status.get("failure_reason"):
        lines.append(f"  failure: {status['failure_reason']}")
    lines.append(f"  config {status['endpoint_config']}")
    for variant in status["variants"]:
        placed = ", ".join(variant["running_on"]) or "no instance yet"
        lines.append(
            f"  variant {variant['variant']}: {variant['current_instances']}/"
            f"{variant['desired_instances']} instances on {placed}"
        )
        for pool in variant["pools"]:
            lines.append(
                f"    pool priority {pool['priority']}: {pool['instance_type']}, "
                f"{pool['running']} running"
            )
        for image in variant["images"]:
            lines.append(f"    image {image}")
        if variant["in_progress"]:
            lines.append(f"    in progress: {', '.join(variant['in_progress'])}")
        lines.extend(
            f"    started {render_line(line)}"
            for line in startup["instances"]
            if _variant_of(line) == variant["variant"]
        )
    variants = {variant["variant"] for variant in status["variants"]}
    elsewhere = [line for line in startup["instances"] if _variant_of(line) not in variants]
    if elsewhere:
        lines.append("  start-up lines of other variants' instances:")
        lines.extend(f"    started {render_line(line)}" for line in elsewhere)
    if startup["missing"]:
        lines.append(f"  start-up: {startup['missing']}")
    return "\n".join(lines)


def _variant_of(line: dict[str, Any]) -> str:
    """SageMaker names each instance's log stream `<variant>/<instance id>`."""
    stream: str = line["log_stream"]
    return stream.partition("/")[0]
