"""ops mark-released and prune-released through botocore's Stubber: the ECR and SageMaker calls
each makes and their parameters (pages followed, the manifest put back under its tag), what it
says, and what it refuses. The same commands against moto's ECR, under the documented
permissions: tests/ops/test_operator_permissions.py."""

from __future__ import annotations

import pytest

from ops.cli import main
from ops.released_images import images_in_use
from tests.support.aws_stubs import stubbed_client
from tests.support.endpoint_descriptions import NOW

REGISTRY, REPOSITORY = "123456789012", "decision-models"
REPOSITORY_URI = f"{REGISTRY}.dkr.ecr.eu-west-1.amazonaws.com/{REPOSITORY}"
CPU, GPU, OLD = ("sha256:" + c * 64 for c in "abc")
WHERE = {"registryId": REGISTRY, "repositoryName": REPOSITORY}
MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"


def uri(digest: str, repository: str = REPOSITORY_URI) -> str:
    return f"{repository}@{digest}"


def tag(digest: str) -> str:
    return "released-" + digest.removeprefix("sha256:")


@pytest.fixture
def ecr():
    with stubbed_client("ecr") as stubbed:
        yield stubbed


@pytest.fixture
def sagemaker():
    with stubbed_client("sagemaker") as stubbed:
        yield stubbed


def services(**clients):
    return clients.__getitem__


# --- mark-released ---------------------------------------------------------------------------
def got(stubber, digest: str, *, media_type: str | None = MEDIA_TYPE, where=WHERE) -> None:
    """batch_get_image of one digest, answered with its manifest."""
    image = {**where, "imageId": {"imageDigest": digest}, "imageManifest": f"manifest {digest}"}
    if media_type:
        image["imageManifestMediaType"] = media_type
    stubber.add_response(
        "batch_get_image",
        {"images": [image], "failures": []},
        {**where, "imageIds": [{"imageDigest": digest}]},
    )


def put(stubber, digest: str, *, media_type: str | None = MEDIA_TYPE, where=WHERE) -> dict:
    """The put_image that tags `digest` released: its expected parameters."""
    expected = {
        **where,
        "imageManifest": f"manifest {digest}",
        "imageTag": tag(digest),
        "imageDigest": digest,
    }
    if media_type:
        expected["imageManifestMediaType"] = media_type
    return expected


def test_mark_released_puts_each_manifest_back_under_its_released_tag(ecr, capsys):
    """The manifest ECR holds, under `released-<hex>`, pinned to its digest and with its media
    type when ECR gave one; each image in its own registry and repository; one line each."""
    client, stubber = ecr
    other = {"registryId": "210987654321", "repositoryName": "team/adapter"}
    other_uri = "210987654321.dkr.ecr.cn-north-1.amazonaws.com.cn/team/adapter"
    got(stubber, CPU)
    stubber.add_response("put_image", {"image": {}}, put(stubber, CPU))
    got(stubber, GPU, media_type=None, where=other)
    stubber.add_response(
        "put_image", {"image": {}}, put(stubber, GPU, media_type=None, where=other)
    )
    assert main(["mark-released", uri(CPU), uri(GPU, other_uri)], clients=services(ecr=client)) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{uri(CPU)} marked {tag(CPU)}",
        f"{uri(GPU, other_uri)} marked {tag(GPU)}",
    ]


@pytest.mark.parametrize(
    "failures, reason",
    [
        (
            [
                {"failureCode": "ImageNotFound", "failureReason": "Requested image not found"},
                {"failureCode": "MissingDigestAndTag", "failureReason": "no digest"},
            ],
            "Requested image not found; no digest",
        ),
        (None, "not in the repository"),
    ],
)
def test_mark_released_stops_at_an_image_ecr_does_not_have(ecr, capsys, failures, reason):
    """ECR's reasons, joined, or a plain word without any; the images after it are not
    marked."""
    client, stubber = ecr
    answer = {"images": []} if failures is None else {"images": [], "failures": failures}
    stubber.add_response("batch_get_image", answer, {**WHERE, "imageIds": [{"imageDigest": CPU}]})
    assert main(["mark-released", uri(CPU), uri(GPU)], clients=services(ecr=client)) == 1
    assert capsys.readouterr().err == f"ops: error: no image {uri(CPU)}: {reason}\n"


def tag_exists(stubber, code: str = "ImageTagAlreadyExistsException") -> None:
    stubber.add_client_error(
        "put_image",
        service_error_code=code,
        http_status_code=400,
        expected_params=put(stubber, CPU),
    )


def tagged(stubber, *digests: str) -> None:
    """describe_images of the released tag: the images that carry it."""
    details = [{**WHERE, "imageDigest": d, "imageTags": [tag(CPU)]} for d in digests]
    stubber.add_response(
        "describe_images",
        {"imageDetails": details},
        {**WHERE, "imageIds": [{"imageTag": tag(CPU)}]},
    )


@pytest.mark.parametrize("code", ["ImageTagAlreadyExistsException", "ImageAlreadyExistsException"])
def test_marking_again_changes_nothing(ecr, capsys, code):
    """An immutable repository refuses the tag it already holds (then the tag is looked up: on
    this digest, it was an earlier release's mark); a mutable one says the image exists."""
    client, stubber = ecr
    got(stubber, CPU)
    tag_exists(stubber, code)
    if code == "ImageTagAlreadyExistsException":
        tagged(stubber, CPU)
    assert main(["mark-released", uri(CPU)], clients=services(ecr=client)) == 0
    assert capsys.readouterr().err == f"{uri(CPU)} marked {tag(CPU)}\n"


def test_a_released_tag_on_another_digest_is_an_error(ecr, capsys):
    client, stubber = ecr
    got(stubber, CPU)
    tag_exists(stubber)
    tagged(stubber, OLD, GPU)
    assert main(["mark-released", uri(CPU)], clients=services(ecr=client)) == 1
    assert capsys.readouterr().err == f"ops: error: {tag(CPU)} is on {GPU}, {OLD}, not {CPU}\n"


def test_another_refusal_of_put_image_is_an_aws_error(ecr, capsys):
    client, stubber = ecr
    got(stubber, CPU)
    tag_exists(stubber, "AccessDeniedException")
    assert main(["mark-released", uri(CPU)], clients=services(ecr=client)) == 1
    err = capsys.readouterr().err
    assert err.startswith("ops: error: AWS: An error occurred (AccessDeniedException)")
    assert "marked" not in err


@pytest.mark.parametrize(
    "image",
    [
        f"{REPOSITORY_URI}:latest",  # a tag, not pinned
        f"{REPOSITORY_URI}@sha256:{'a' * 63}",
        f"public.ecr.aws/{REPOSITORY}@{CPU}",
        f"{REGISTRY}.dkr.ecr.eu-west-1.amazonaws.com@{CPU}",  # no repository
    ],
)
def test_mark_released_refuses_an_image_not_pinned_in_private_ecr_before_any_call(
    ecr, capsys, image
):
    client, _ = ecr  # nothing queued: any call fails the test
    assert main(["mark-released", uri(CPU), image], clients=services(ecr=client)) == 2
    assert capsys.readouterr().err == (
        f"ops: error: {image!r} is not a private ECR image URI pinned by digest\n"
    )


# --- images_in_use -----------------------------------------------------------------------------
def listed(stubber, names: list[str], *, token: str | None = None, after: str | None = None):
    """One page of list_endpoints: `token` the one it was asked with, `after` the next."""
    summaries = [
        {
            "EndpointName": name,
            "EndpointArn": f"arn:aws:sagemaker:eu-west-1:{REGISTRY}:endpoint/{name}",
            "CreationTime": NOW,
            "LastModifiedTime": NOW,
            "EndpointStatus": "InService",
        }
        for name in names
    ]
    page = {"Endpoints": summaries, **({"NextToken": after} if after else {})}
    stubber.add_response(
        "list_endpoints", page, {"MaxResults": 100, **({"NextToken": token} if token else {})}
    )


def described(stubber, name: str, status: str = "InService", variants=None) -> None:
    """describe_endpoint: `variants` as ProductionVariants (None: no such key)."""
    endpoint = {
        "EndpointName": name,
        "EndpointArn": f"arn:aws:sagemaker:eu-west-1:{REGISTRY}:endpoint/{name}",
        "EndpointConfigName": f"{name}-config",
        "EndpointStatus": status,
        "CreationTime": NOW,
        "LastModifiedTime": NOW,
    }
    if variants is not None:
        endpoint["ProductionVariants"] = variants
    stubber.add_response("describe_endpoint", endpoint, {"EndpointName": name})


def running(*images: dict) -> dict:
    return {"VariantName": "AllTraffic", "DeployedImages": list(images)}


def test_images_in_use_reads_every_page_and_prefers_the_image_sagemaker_resolved(sagemaker):
    """A variant deployed from a tag runs the digest SageMaker resolved, not the tag; one
    deployed by digest (nothing resolved) runs that digest. Endpoints without variants, or a
    variant without images, run nothing."""
    client, stubber = sagemaker
    listed(stubber, ["cpu", "failed"], after="page-2")
    described(
        stubber,
        "cpu",
        variants=[
            running(
                {"SpecifiedImage": f"{REPOSITORY_URI}:v7", "ResolvedImage": uri(CPU)},
                {"SpecifiedImage": uri(GPU)},
            ),
            {"VariantName": "Shadow"},
        ],
    )
    described(stubber, "failed", "Failed")
    listed(stubber, ["async"], token="page-2")
    described(stubber, "async", "OutOfService", [running({"ResolvedImage": uri(OLD)})])
    assert images_in_use(client) == ({CPU, GPU, OLD}, [])


def test_images_in_use_names_the_endpoints_not_settled(sagemaker):
    client, stubber = sagemaker
    listed(stubber, ["a", "b", "c"])
    described(stubber, "a", "Creating")
    described(stubber, "b", "InService", [running({"ResolvedImage": uri(CPU)})])
    described(stubber, "c", "RollingBack", [running({"ResolvedImage": uri(GPU)})])
    assert images_in_use(client) == ({CPU, GPU}, ["a (Creating)", "c (RollingBack)"])


# --- prune-released ----------------------------------------------------------------------------
def images(stubber, details: list[dict], *, token: str | None = None, after: str | None = None):
    """One page of the repository's tagged images."""
    page = {"imageDetails": [{**WHERE, **d} for d in details]}
    if after:
        page["nextToken"] = after
    expected = {
        **WHERE,
        "filter": {"tagStatus": "TAGGED"},
        **({"nextToken": token} if token else {}),
    }
    stubber.add_response("describe_images", page, expected)


def untagged(stubber, digest: str) -> None:
    stubber.add_response(
        "batch_delete_image",
        {"imageIds": [{"imageTag": tag(digest)}], "failures": []},
        {**WHERE, "imageIds": [{"imageTag": tag(digest)}]},
    )


def test_prune_released_untags_only_released_images_no_endpoint_runs(ecr, sagemaker, capsys):
    """Every page of the repository is read; of the `released-` tags, those whose image an
    endpoint runs are kept and the others removed (one call each, the tag alone: the image
    keeps its build tag). Build tags are never touched."""
    (ecr_client, ecr_stub), (sm_client, sm_stub) = ecr, sagemaker
    listed(sm_stub, ["cpu"])
    described(sm_stub, "cpu", variants=[running({"ResolvedImage": uri(CPU)})])
    # tag(CPU) (released-aaa…) sorts before tag(GPU) and tag(OLD): the kept one comes first.
    images(ecr_stub, [{"imageDigest": OLD, "imageTags": ["build-1", tag(OLD)]}], after="next")
    images(
        ecr_stub,
        [
            {"imageDigest": CPU, "imageTags": [tag(CPU), "build-3"]},
            {"imageDigest": GPU, "imageTags": [tag(GPU)]},
            {"imageDigest": "sha256:" + "d" * 64, "imageTags": ["build-4"]},
        ],
        token="next",
    )
    untagged(ecr_stub, GPU)
    untagged(ecr_stub, OLD)
    by_service = services(ecr=ecr_client, sagemaker=sm_client)
    assert main(["prune-released", REPOSITORY_URI], clients=by_service) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"kept {tag(CPU)}: an endpoint runs it",
        f"unmarked {tag(GPU)}: no endpoint runs it",
        f"unmarked {tag(OLD)}: no endpoint runs it",
    ]


def test_prune_released_touches_nothing_while_endpoints_change(sagemaker, capsys):
    client, stubber = sagemaker  # no ECR client: it is never asked
    listed(stubber, ["a", "b"])
    described(stubber, "a", "Updating")
    described(stubber, "b", "SystemUpdating")
    assert main(["prune-released", REPOSITORY_URI], clients=services(sagemaker=client)) == 1
    assert capsys.readouterr().err == (
        "ops: error: endpoints changing: a (Updating), b (SystemUpdating);"
        " prune once they are InService\n"
    )


@pytest.mark.parametrize(
    "repository",
    [uri(CPU), f"public.ecr.aws/{REPOSITORY}", f"{REPOSITORY_URI}:latest", REPOSITORY],
)
def test_prune_released_refuses_what_is_not_a_private_repository(capsys, repository):
    assert main(["prune-released", repository], clients=services()) == 2
    assert capsys.readouterr().err == (
        f"ops: error: {repository!r} is not a private ECR repository URI\n"
    )
