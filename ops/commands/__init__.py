"""`python -m ops`'s subcommands, a module each: its parser (`add_parser`) and its handler
(`run`). What several share lives outside this package (ops/common.py, and the modules of the
work they do); no subcommand imports another."""
