#!/usr/bin/env python3
"""CDK app entry point: `npx cdk synth` runs this. Configuration comes from cdk.json context and
`-c key=value` only, validated once here (see stacks/config/)."""

import sys
from pathlib import Path

from aws_cdk import App
from pydantic import ValidationError

from stacks.app import compose
from stacks.config import AppConfig

app = App()
try:
    config = AppConfig.from_context(app.node.try_get_context)
except ValidationError as error:
    sys.exit(f"Invalid configuration (cdk.json context or -c):\n{error}")
compose(app, config=config, repository_root=Path(__file__).resolve().parent)
app.synth()
