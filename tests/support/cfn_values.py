"""CloudFormation values as readable text, for comparing what a template says.

No CDK import here: the Docker stand-in and the CodeBuild view read templates without it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# Renders one intrinsic its own way, or returns None to leave it to `text`.
Special = Callable[[str, Any], "str | None"]


def text(value, special: Special | None = None) -> str:
    """A CloudFormation value as text, intrinsics written <...>, for readable comparisons:
    `{"Ref": X}` is <X>, `{"Fn::GetAtt": [X, A]}` <X.A>, a mapping lookup <Map>, and a
    selected split part `<X>[i]`. `special` may render some intrinsics otherwise."""

    def render(value) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return ",".join(render(v) for v in value)
        ((intrinsic, argument),) = value.items()
        if special is not None and (custom := special(intrinsic, argument)) is not None:
            return custom
        if intrinsic == "Fn::Join":
            return argument[0].join(render(part) for part in argument[1])
        if intrinsic == "Ref":
            return f"<{argument}>"
        if intrinsic == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
        if intrinsic == "Fn::FindInMap":
            return f"<{argument[0]}>"
        if intrinsic == "Fn::Sub":
            return re.sub(r"\$\{([^}]+)\}", lambda m: render({"Ref": m[1]}), argument)
        if intrinsic == "Fn::Select":
            index, (split,) = argument[0], argument[1].values()
            return f"{render(split[1])}[{index}]"
        raise AssertionError(f"cannot render {value}")

    return render(value)


def listed(value) -> list:
    """IAM's Action and Resource: one value or a list of them."""
    return value if isinstance(value, list) else [value]
