"""Stage 5: how people would rather see tokens. `tokens` (the data of a token view and alignments), `terminal`
and `page` (drawing it), `report` (verification reports as text and HTML), `conversation` (the view command)."""
