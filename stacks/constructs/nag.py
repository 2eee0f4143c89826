"""Acknowledging cdk-nag AwsSolutions findings, each with a reason, on the construct concerned."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

_PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge `rule` (e.g. "CB4" or "IAM5[Resource::*]") on `scope` and its children."""
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{_PACK}::{_PACK}-{rule}", reason=reason))


def acknowledge_wildcard_resource(scope: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge an IAM5 finding for one resource ARN that ends in a wildcard.

    cdk-nag names such a finding after the ARN as the template holds it, with references
    written `<LogicalId>` and attributes `<LogicalId.Attr>`; rendering the same way keeps the
    acknowledgement tied to exactly that resource.
    """
    rendered = _render(Stack.of(scope).resolve(resource))
    acknowledge(scope, f"IAM5[Resource::{rendered}]", reason)


def acknowledge_wildcard_actions(scope: IConstruct, actions: list[str], reason: str) -> None:
    for action in actions:
        acknowledge(scope, f"IAM5[Action::{action}]", reason)


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((intrinsic, argument),) = value.items()
        if intrinsic == "Ref":
            return f"<{argument}>"
        if intrinsic == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
        if intrinsic == "Fn::Join":
            separator: str
            separator, parts = argument
            return separator.join(_render(part) for part in parts)
    raise ValueError(f"cannot render {value!r} the way cdk-nag names findings")
