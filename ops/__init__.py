"""Operator command line: build images and model archives, invoke endpoints, show status."""
