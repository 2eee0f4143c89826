"""An S3 client (on moto) whose calls are answered as AWS answers a caller with one identity
policy: each call is evaluated as IAM does (tests/support/iam_policy.py) and refused with 403
AccessDenied when no statement allows it; and, as S3 documents, a request for a missing
object answers 403 rather than 404 to a caller without s3:ListBucket on the bucket.

moto answers every call as if allowed and every missing key with 404, so a command that only
works with rights a user lacks would pass against it unchanged; this puts the policy back.
"""

from __future__ import annotations

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from tests.support.iam_actions import operation_action
from tests.support.iam_policy import Rendered, Request, allows

_OBJECT_READS = ("GetObject", "HeadObject")


def _denied(operation: str) -> tuple[AWSResponse, dict]:
    # A HEAD response has no body: botocore reads its code from the status alone.
    if operation == "HeadObject":
        error = {"Code": "403", "Message": "Forbidden"}
    else:
        error = {"Code": "AccessDenied", "Message": "Access Denied"}
    return AWSResponse("", 403, {}, None), {
        "Error": error,
        "ResponseMetadata": {"HTTPStatusCode": 403},
    }


def restrict(client, statements: list[dict], *, unrestricted) -> list[str]:
    """Make `client` answer under `statements` (`unrestricted`: a client on the same moto
    account, to see what exists); returns the requests IAM saw, as text."""
    rendered, seen = Rendered({}), []

    def remember(params, context, **_):
        context["api_params"] = dict(params)

    def allowed(request: Request) -> bool:
        seen.append(str(request))
        return allows(statements, request, rendered)

    def enforce(model, context, **_):
        params = context["api_params"]
        bucket = f"arn:aws:s3:::{params['Bucket']}"
        if "Key" in params:
            resource, extra = f"{bucket}/{params['Key']}", ()
        else:
            resource, extra = bucket, (("s3:prefix", params.get("Prefix", "")),)
        action = operation_action("s3", model.name)
        if not allowed(Request(action, resource, extra)):
            return _denied(model.name)
        if model.name in _OBJECT_READS and not _exists(params) and not _may_list(params):
            return _denied(model.name)
        return None

    def _exists(params) -> bool:
        try:
            unrestricted.head_object(Bucket=params["Bucket"], Key=params["Key"])
        except ClientError:
            return False
        return True

    def _may_list(params) -> bool:
        # A HeadObject carries no s3:prefix: only an unconditioned ListBucket counts.
        bucket = f"arn:aws:s3:::{params['Bucket']}"
        return allows(statements, Request("s3:ListBucket", bucket), rendered)

    client.meta.events.register("before-parameter-build.s3.*", remember)
    client.meta.events.register("before-call.s3.*", enforce)
    return seen
