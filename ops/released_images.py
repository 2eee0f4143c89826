"""python -m ops mark-released IMAGE_URI...: tag each image a release deploys, so that the
repository's lifecycle rules never expire it (stacks/stateful_stack.py keeps every image with
a `released-` tag); an endpoint still needs its image to replace or add an instance.

The tag is `released-<digest hex>`: one per digest, so marking again changes nothing (the
repository's tags are immutable)."""

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
