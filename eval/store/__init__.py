"""Rows at rest: result shards and archives, their schemas and keys, the resume policy, and the guard on committed outputs."""
