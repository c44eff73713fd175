"""Stage 2: install a template on a tokenizer. `plan` holds the value that describes every change, `planner`
computes it without side effects, `apply` writes it atomically after a reload check."""
