"""python -m ops prune-released REPOSITORY_URI: untag the released images no endpoint runs any
more, so the lifecycle rules expire them like any other (ops/released_images.py)."""

from __future__ import annotations

import argparse

from ops.common import EXIT_FAILED, Runtime, Subcommands, UsageError, _error, _info
from ops.released_images import RELEASED_TAG_PREFIX, REPOSITORY, images_in_use

NAME = "prune-released"


def add_parser(commands: Subcommands) -> None:
    prune = commands.add_parser(
        NAME,
        help="untag released images no endpoint runs any more, so the"
        " lifecycle rules expire them",
    )
    prune.add_argument(
        "repository",
        metavar="REPOSITORY_URI",
        help="<account>.dkr.ecr.<region>.amazonaws.com/<repository>"
        " (the stateful stack's ImageRepositoryUri)",
    )


def run(args: argparse.Namespace, runtime: Runtime) -> int:
    match = REPOSITORY.match(args.repository)
    if match is None:
        raise UsageError(f"{args.repository!r} is not a private ECR repository URI")
    in_use, unsettled = images_in_use(runtime.clients("sagemaker"))
    if unsettled:
        _error(f"endpoints changing: {', '.join(unsettled)}; prune once they are InService")
        return EXIT_FAILED
    ecr = runtime.clients("ecr")
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
