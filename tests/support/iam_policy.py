"""Reading a synthesized template's IAM policies the way IAM will: who may do what, on what.

Values are rendered to text with the template's unknowns kept as `<Token>`s (`<AWS.Region>`,
`<ImagesAB12CD34>` for a resource's Ref). A resource's `Arn` attribute is rendered as the ARN
CloudFormation gives it, so `<Bucket.Arn>` and `arn:aws:s3:::<Bucket>` compare equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.support.cfn_values import listed, text

PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}
_ARN_OF = {
    "AWS::S3::Bucket": "arn:aws:s3:::<{id}>",
    "AWS::ECR::Repository": "arn:aws:ecr:<AWS.Region>:<AWS.AccountId>:repository/<{id}>",
    "AWS::IAM::Role": "arn:aws:iam::<AWS.AccountId>:role/<{id}>",
    "AWS::Logs::LogGroup": "arn:aws:logs:<AWS.Region>:<AWS.AccountId>:log-group:<{id}>:*",
    "AWS::CodeBuild::Project": "arn:aws:codebuild:<AWS.Region>:<AWS.AccountId>:project/<{id}>",
}


class Rendered:
    """One template's values as text."""

    def __init__(self, template: dict) -> None:
        self.template = template
        self.resources: dict[str, dict] = template.get("Resources", {})

    def text(self, value) -> str:
        return text(value, self._special)

    def _special(self, intrinsic: str, argument) -> str | None:
        if intrinsic == "Ref":
            # Pseudo parameters as <AWS.Region>: no colon, so ARNs still split on ":".
            return PSEUDO.get(argument, f"<{argument.replace('::', '.')}>")
        if intrinsic == "Fn::GetAtt":
            logical_id, attribute = argument
            pattern = _ARN_OF.get(self.resources[logical_id]["Type"])
            if attribute == "Arn" and pattern:
                return pattern.format(id=logical_id)
        if intrinsic == "Fn::Select":
            index, listed = argument
            ((split, (separator, source)),) = listed.items()
            assert split == "Fn::Split", listed
            return self.text(source).split(separator)[int(index)]
        return None  # Fn::Join, Fn::Sub (through Ref), Fn::FindInMap, other attributes

    def statements_of_role(self, role_logical_id: str) -> list[dict]:
        """Every statement of every AWS::IAM::Policy attached to the role."""
        found = []
        for resource in self.resources.values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            properties = resource["Properties"]
            if {"Ref": role_logical_id} in properties.get("Roles", []):
                found.extend(properties["PolicyDocument"]["Statement"])
        return found

    def project_role(self, project: dict) -> str:
        """The logical id of a CodeBuild project's service role."""
        return project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]


@dataclass(frozen=True)
class Request:
    """One API call as IAM sees it."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.context)
        return f"{self.action} on {self.resource}{extra}"


def _matches(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    if ignore_case:
        pattern, value = pattern.lower(), value.lower()
    # IAM's wildcards: * any run of characters, ? one character; nothing else is special.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.S) is not None


_CONDITIONS = {
    "StringEquals": lambda expected, actual: actual == expected,
    "StringLike": lambda expected, actual: _matches(expected, actual),
    "Bool": lambda expected, actual: actual.lower() == str(expected).lower(),
}


def _conditions_hold(statement: dict, rendered: Rendered, context: dict[str, str]) -> bool:
    for operator, tests in statement.get("Condition", {}).items():
        check = _CONDITIONS.get(operator)
        if check is None:
            raise AssertionError(f"no evaluator for condition operator {operator}")
        for key, expected in tests.items():
            actual = context.get(key)
            if actual is None:
                return False  # a key the request does not carry fails the condition
            if not any(check(rendered.text(e), actual) for e in listed(expected)):
                return False
    return True


def _applies(statement: dict, request: Request, rendered: Rendered) -> bool:
    for unsupported in ("NotAction", "NotResource", "NotPrincipal"):
        assert unsupported not in statement, f"no evaluator for {unsupported}"
    actions = listed(statement["Action"])
    if not any(_matches(a, request.action, ignore_case=True) for a in actions):
        return False
    resources = [rendered.text(r) for r in listed(statement["Resource"])]
    if not any(_matches(r, request.resource) for r in resources):
        return False
    return _conditions_hold(statement, rendered, dict(request.context))


def allows(statements: list[dict], request: Request, rendered: Rendered) -> bool:
    """IAM's identity-policy logic: an explicit Deny wins, else some Allow must apply."""
    applying = [s for s in statements if _applies(s, request, rendered)]
    if any(s["Effect"] == "Deny" for s in applying):
        return False
    return any(s["Effect"] == "Allow" for s in applying)


# Stand-ins for a template's unknowns when a script runs here or a linter reads a policy;
# mapped back afterwards.
KNOWN_STANDINS = {
    "<AWS.AccountId>": "123456789012",
    "<AWS.Region>": "eu-west-1",
    "<DlcRepositoryAccountMap>": "763104351884",
}


class Standins:
    """Concrete values for a project's environment, and the way back to template text."""

    def __init__(self) -> None:
        self.to_value = dict(KNOWN_STANDINS)

    def value(self, text: str) -> str:
        for token in re.findall(r"<[^<>]+>", text):
            self.to_value.setdefault(token, f"standin{len(self.to_value):02d}")
            text = text.replace(token, self.to_value[token])
        return text

    def back(self, text: str) -> str:
        for token, value in sorted(self.to_value.items(), key=lambda i: -len(i[1])):
            text = text.replace(value, token)
        return text
