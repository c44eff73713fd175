"""Stage 3: named checks on a template and tokenizer. `results` (check results, reports), `context` (what every
check reads), `checks/` (one module per concern, one ordered tuple of checks), `runner` (verify, verify_all),
`references` (official renderers), `dataset` (the per-record checks over a file of conversations), `golden`,
`content_none` (why a template's `content is none` test misleads once transformers drops None values)."""
