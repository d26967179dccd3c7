"""Where a run's prompts come from: the six benchmark suites, or a prompt set of your own."""
