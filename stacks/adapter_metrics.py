"""The decision adapter's own CloudWatch metrics, as its EMF log lines name them.

The adapter writes embedded-metric-format records into the endpoint's log group
(`/aws/sagemaker/Endpoints/<endpoint>`); CloudWatch extracts these metrics from them. The
stacks alarm on them, so the names live here once and a test holds them to the contract.
"""

from __future__ import annotations

NAMESPACE = "DecisionAdapter"
ENDPOINT_DIMENSION = "Endpoint"  # value: the SageMaker endpoint name
KIND_DIMENSION = "Kind"  # DecisionLatencyMs only, beside Endpoint
KINDS = ("decision", "decisions", "systemone", "chat")

OVERLOADED = "Overloaded"  # Count: each 503 for backpressure
ADMITTED = "Admitted"  # Count: each request let into the model's queue
QUEUE_WAIT_MS = "QueueWaitMs"
DECISION_LATENCY_MS = "DecisionLatencyMs"
