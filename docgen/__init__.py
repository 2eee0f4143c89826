"""The reference pages' generated blocks: each rendered from the code that is the truth
(the adapter's Settings, the CDK app's configuration schema, the newest benchmark) and written
between markers on its page. `python -m docgen` rewrites them; tests/docs/test_generated_docs.py
fails while a page and its source differ."""
