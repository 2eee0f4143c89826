"""python -m ops mark-released IMAGE_URI...: tag each image a release deploys, so that the
repository's lifecycle rules never expire it (stacks/stateful_stack.py keeps every image with
a `released-` tag); an endpoint still needs its image to replace or add an instance.

The tag is `released-<digest hex>`: one per digest, so marking again changes nothing (the
repository's tags are immutable).

python -m ops prune-released REPOSITORY_URI: the other way, once a release is replaced: every
`released-` tag of the repository whose image no endpoint of the account and region runs any
more is removed, so the lifecycle rules expire that image like any other (beyond the newest
50). Nothing is removed while an endpoint is being created or updated (which images it will
run is not settled)."""

from __future__ import annotations

import re

from ops.clients import ClientFactory
from ops.common import EXIT_FAILED, UsageError, _error, _info

RELEASED_TAG_PREFIX = "released-"
_IMAGE = re.compile(
    r"^(?P<registry>\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[^@:]+)@(?P<digest>sha256:(?P<hex>[0-9a-f]{64}))$"
)


def add_command(commands) -> None:
    mark = commands.add_parser(
        "mark-released",
        help="tag a release's images so that the lifecycle rules"  # pragma: no mutate
        " keep them",  # pragma: no mutate
    )
    mark.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE_URI",  # pragma: no mutate
        help="<account>.dkr.ecr.<region>.amazonaws.com/<repository>"  # pragma: no mutate
        "@sha256:<digest>",  # pragma: no mutate
    )

    prune = commands.add_parser(
        "prune-released",
        help="untag released images no endpoint runs any more, so the"  # pragma: no mutate
        " lifecycle rules expire them",  # pragma: no mutate
    )
    prune.add_argument(
        "repository",
        metavar="REPOSITORY_URI",  # pragma: no mutate
        help="<account>.dkr.ecr.<region>.amazonaws.com/<repository>"  # pragma: no mutate
        " (the stateful stack's ImageRepositoryUri)",  # pragma: no mutate
    )


_REPOSITORY = re.compile(
    r"^(?P<registry>\d{12})\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<repository>[^@:]+)$"
)
# An endpoint in these states runs the images it will keep running.
_SETTLED = ("InService", "OutOfService", "Failed")


def images_in_use(sagemaker) -> tuple[set[str], list[str]]:
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


def prune(args, make_client: ClientFactory) -> int:
    match = _REPOSITORY.match(args.repository)
    if match is None:
        raise UsageError(f"{args.repository!r} is not a private ECR repository URI")
    in_use, unsettled = images_in_use(make_client("sagemaker"))
    if unsettled:
        _error(f"endpoints changing: {', '.join(unsettled)}; prune once they are InService")
        return EXIT_FAILED
    ecr = make_client("ecr")
    where = {"registryId": match["registry"], "repositoryName": match["repository"]}
    token: dict[str, str] = {}
    released = []
    while True:
        page = ecr.describe_images(**where, filter={"tagStatus": "TAGGED"}, **token)
        for detail in page["imageDetails"]:
            tags = detail.get("imageTags", [])
            released += [
                (t, detail["imageDigest"]) for t in tags if t.startswith(RELEASED_TAG_PREFIX)
            ]
        if not page.get("nextToken"):
            break
        token = {"nextToken": page["nextToken"]}
    for tag, digest in sorted(released):
        if digest in in_use:
            _info(f"kept {tag}: an endpoint runs it")
            continue
        # Only the tag goes: the image keeps its build tag, and the lifecycle rules decide.
        ecr.batch_delete_image(**where, imageIds=[{"imageTag": tag}])
        _info(f"unmarked {tag}: no endpoint runs it")
    return 0


def released_tag(digest_hex: str) -> str:
    return f"{RELEASED_TAG_PREFIX}{digest_hex}"


def mark(args, make_client: ClientFactory) -> int:
    from botocore.exceptions import ClientError

    parsed = []
    for uri in args.images:
        match = _IMAGE.match(uri)
        if match is None:
            raise UsageError(f"{uri!r} is not a private ECR image URI pinned by digest")
        parsed.append(match)
    ecr = make_client("ecr")
    for match in parsed:
        tag = released_tag(match["hex"])
        where = {"registryId": match["registry"], "repositoryName": match["repository"]}
        found = ecr.batch_get_image(**where, imageIds=[{"imageDigest": match["digest"]}])
        if not found["images"]:
            reasons = "; ".join(f["failureReason"] for f in found.get("failures", []))
            _error(f"no image {match[0]}: {reasons or 'not in the repository'}")
            return EXIT_FAILED
        image = found["images"][0]
        media_type = image.get("imageManifestMediaType")
        try:
            ecr.put_image(
                **where,
                imageManifest=image["imageManifest"],
                imageTag=tag,
                imageDigest=match["digest"],
                **({"imageManifestMediaType": media_type} if media_type else {}),
            )
        except ClientError as error:
            code = error.response["Error"]["Code"]
            # The same tag on the same digest: marked by an earlier release (an immutable
            # repository says so with ImageTagAlreadyExistsException; it is accepted once the
            # tag is seen on this digest).
            if code == "ImageTagAlreadyExistsException":
                tagged = ecr.describe_images(**where, imageIds=[{"imageTag": tag}])
                digests = {detail["imageDigest"] for detail in tagged["imageDetails"]}
                if digests != {match["digest"]}:
                    _error(f"{tag} is on {', '.join(sorted(digests))}, not {match['digest']}")
                    return EXIT_FAILED
            elif code != "ImageAlreadyExistsException":
                raise
        _info(f"{match[0]} marked {tag}")
    return 0
