"""Foundation: chat templates as text. Parsing them as transformers does (`syntax`), rendering them under limits
(`limits`, `rendering`) and in other engines (`engines`), what a template emits (`analysis`: control and stop
tokens), and where each assistant turn's generated part lies (`spans`, `training_variant`).

Nothing here imports a stage of the pipeline (families, installation, verification, training, view, publish)."""
