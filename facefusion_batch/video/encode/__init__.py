"""Writing outputs: the encoder policy and format table, the threaded atomic writer, audio
carry-over, image sequences, the written record, and FaceFusion's trimmed steps and their join."""
