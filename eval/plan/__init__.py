"""What a sweep would run, counted from its own expansion, with a stated GPU-time and disk estimate (``rheo plan``)."""
