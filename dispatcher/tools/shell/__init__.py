"""The shell tool: a command line parsed, rated and run in the sandbox."""
