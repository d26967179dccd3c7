"""The typed run configuration: its schema, the checks beyond types, composing it without a command line, the sweep check."""
