"""python -m ops mark-released IMAGE_URI...: tag each image a release deploys, so that the image
repository's lifecycle rules never expire it (ops/released_images.py)."""

from __future__ import annotations

import argparse

from ops.common import EXIT_FAILED, Runtime, Subcommands, UsageError, _error, _info
from ops.released_images import IMAGE, released_tag

NAME = "mark-released"


def add_parser(commands: Subcommands) -> None:
    mark = commands.add_parser(
        NAME,
        help="tag a release's images so that the lifecycle rules" " keep them",
    )
    mark.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE_URI",
        help="<account>.dkr.ecr.<region>.amazonaws.com/<repository>" "@sha256:<digest>",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    from botocore.exceptions import ClientError

    parsed = []
    for uri in args.images:
        match = IMAGE.match(uri)
        if match is None:
            raise UsageError(f"{uri!r} is not a private ECR image URI pinned by digest")
        parsed.append(match)
    ecr = runtime.clients("ecr")
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
