"""One module per command of the command line (``console/cli.py`` parses and dispatches)."""
