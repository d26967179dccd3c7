"""Reports of same-state rows: paired statistics, tables, figures, and the ranking-option and head-quality studies."""
