"""The one run loop and its measurements (realized decoding, same-state scoring), plus the exact-expectation drivers."""
