"""Reports of realized rows: aggregation and intervals, the one Markdown writer, the paper's tables and figures, speed."""
