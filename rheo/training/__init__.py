"""Training utilities for draft heads (EAGLE-3 data, vocabulary, training-time test)."""
