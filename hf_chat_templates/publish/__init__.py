"""Stage 6: publish a verified tokenizer folder to the Hub as a pull request (`hub`)."""
