"""The images of releases, for python -m ops mark-released and prune-released (ops/commands/).

mark-released IMAGE_URI...: tag each image a release deploys, so that the
repository's lifecycle rules never expire it (stacks/stateful_stack.py keeps every image with
a `released-` tag); an endpoint still needs its image to replace or add an instance.

The tag is `released-<digest hex>`: one per digest, so marking again changes nothing (the
repository's tags are immutable).

prune-released REPOSITORY_URI: the other way, once a release is replaced: every
`released-` tag of the repository whose image no endpoint of the account and region runs any
more is removed, so the lifecycle rules expire that image like any other (beyond the newest
50). Nothing is removed while an endpoint is being created or updated (which images it will
run is not settled)."""

from __future__ import annotations

import re

from ops.clients import Client

RELEASED_TAG_PREFIX = "released-"
IMAGE = re.compile(
    r"^(?P<registry>\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[^@:]+)@(?P<digest>sha256:(?P<hex>[0-9a-f]{64}))$"
)
REPOSITORY = re.compile(
    r"^(?P<registry>\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<repository>[^@:]+)$"
)
# An endpoint in these states runs the images it will keep running.
_SETTLED = ("InService", "OutOfService", "Failed")


def images_in_use(sagemaker: Client) -> tuple[set[str], list[str]]:
    """The digests of the images every endpoint's variants run (as SageMaker resolved them),
    and the endpoints whose images are not settled (being created, updated, rolled back)."""
    digests: set[str] = set()
    unsettled = []
    token: dict[str, str] = {}
    while True:
        page = sagemaker.list_endpoints(MaxResults=100, **token)
        for summary in page["Endpoints"]:
            endpoint = sagemaker.describe_endpoint(EndpointName=summary["EndpointName"])
            if endpoint["EndpointStatus"] not in _SETTLED:
                unsettled.append(f"{endpoint['EndpointName']} ({endpoint['EndpointStatus']})")
            for variant in endpoint.get("ProductionVariants", []):
                for image in variant.get("DeployedImages", []):
                    uri = image.get("ResolvedImage") or image.get("SpecifiedImage") or ""
                    digests.add(uri.rpartition("@")[2])
        if not page.get("NextToken"):
            return digests, unsettled
        token = {"NextToken": page["NextToken"]}


def released_tag(digest_hex: str) -> str:
    return f"{RELEASED_TAG_PREFIX}{digest_hex}"
