"""Foundation: tokenizer folders. Reading them (`folder`), fetching them from the Hub (`hub`), editing the
vocabulary as data (`vocab`), and building real tokenizers offline (`base`). Writing goes through
`hf_chat_templates.outputs`, the one writer."""
