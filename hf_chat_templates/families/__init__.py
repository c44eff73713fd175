"""Stage 1: the bundled template families over model_configs/ (`registry`), which template a command works on
(`source`: a family, a file or the folder's own), and the control and stop tokens it emits (`tokens`)."""
